// The production overlay's probes against real processes: renders
// k8s/overlays/production with `kubectl kustomize`, starts every pod of it
// (five expert nodes, their import-share init step, the coordinator) from the
// rendered container args, env and ConfigMap files, each pod in its own
// network namespace (its "pod IP"), with TLS from deploy/make-certs.sh made as
// k8s/README.md says, and runs each rendered probe the way kubelet does, from
// another namespace against the pod's IP: httpGet (success: 200-399 within
// timeoutSeconds), exec (exit 0), grpc (plaintext grpc.health.v1), tcpSocket.
// Every startup, liveness and readiness probe must pass once the pods run.
// Negative controls: a kubelet-style plaintext gRPC probe of the TLS port 7070
// (what the manifests had before) must fail, and the coordinator's readiness
// must fail once no node is left.
//
// Paths the pods mount are mapped onto a temporary folder (/etc/colibri ->
// the ConfigMap's files, /etc/colibri-tls -> the certificates,
// /run/secrets/colibri/token -> a real token, /models/model.gguf -> the
// fixture, /var/lib/colibri/node and /var/cache/colibri -> per pod).
// Usage: node k8s_probes_test.js SOURCE_DIR BUILD_DIR FIXTURES_DIR. Exit 77:
// skipped (not root, no kubectl, ip, curl or fixture).
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const {execFileSync, spawn, spawnSync} = require('child_process');
const YAML = require('yaml');

const [src, build, fixturesArg] = process.argv.slice(2);
const fixtures = process.env.COLIBRI_FIXTURES_DIR || fixturesArg;
const model = path.join(fixtures || '', 'models', 'qwen3moe-tiny-f32.gguf');

function skip(why) {
  console.log(`SKIP: ${why}`);
  process.exit(77);
}
const onPath = (tool) => spawnSync('sh', ['-c', `command -v ${tool}`]).status === 0;
if (process.getuid() !== 0) skip('needs root to create network namespaces');
for (const tool of ['kubectl', 'ip', 'curl', 'openssl']) if (!onPath(tool)) skip(`${tool} not found`);
if (!fs.existsSync(model)) skip(`fixture ${model} not found`);
const bin = {
  'colibri-coordinator': path.join(build, 'coordinator', 'colibri-coordinator'),
  'colibri-expert-node': path.join(build, 'expert_node', 'colibri-expert-node'),
  'colibri-client': path.join(build, 'client', 'colibri-client'),
};
for (const b of Object.values(bin)) if (!fs.existsSync(b)) skip(`${b} not built`);

let failures = 0;
function fail(what) {
  failures++;
  console.log(`FAIL: ${what}`);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// --- Render.
const objs = YAML.parseAllDocuments(
    execFileSync('kubectl', ['kustomize', path.join(src, 'k8s', 'overlays', 'production')], {encoding: 'utf8'}))
    .map((d) => d.toJS()).filter((o) => o);
const nodes = objs.find((o) => o.kind === 'StatefulSet');
const coord = objs.find((o) => o.kind === 'Deployment');
const config = objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name.startsWith('colibri-config'));

// --- The pods' files.
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'colibri-probes-'));
const lab = path.join(tmp, 'lab');
execFileSync('bash', [path.join(src, 'deploy', 'make-certs.sh'), lab,
  'colibri,colibri.colibri,*.colibri-nodes,*.colibri-nodes.colibri.svc.cluster.local'], {stdio: 'ignore'});
const podDir = (pod) => path.join(tmp, pod);
function mapPaths(text, pod) {
  return String(text)
      .split('/etc/colibri-tls/').join(`${lab}/colibri/`)
      .split('/etc/colibri/').join(`${podDir(pod)}/config/`)
      .split('/run/secrets/colibri/token').join(`${lab}/token`)
      .split('/models/model.gguf').join(model)
      .split('/var/lib/colibri/node').join(`${podDir(pod)}/data`)
      .split('/var/cache/colibri').join(`${podDir(pod)}/cache`);
}
// Each pod mounts the ConfigMap; its paths name the pod's own volumes.
function writeConfig(pod) {
  fs.mkdirSync(path.join(podDir(pod), 'config'), {recursive: true});
  for (const [name, text] of Object.entries(config.data)) {
    fs.writeFileSync(path.join(podDir(pod), 'config', name), mapPaths(text, pod));
  }
}

// --- Networks: the coordinator's namespace joined to each node's by a veth
// pair (10.79.N.0/24, the node .2, the coordinator .1); names from
// /etc/netns/NS/hosts, as the cluster DNS would give them.
const id = `k${process.pid % 100000}`;
const podNames = Array.from({length: nodes.spec.replicas}, (_, i) => `${nodes.metadata.name}-${i}`);
const ns = {coordinator: `${id}-coord`};
podNames.forEach((p, i) => { ns[p] = `${id}-n${i}`; });
const podIp = {coordinator: '10.79.0.1'};
podNames.forEach((p, i) => { podIp[p] = `10.79.${i}.2`; });
const children = [];
function cleanup() {
  for (const c of children) {
    try { process.kill(c.pid, 'SIGKILL'); } catch (e) { /* gone */ }
  }
  for (const n of Object.values(ns)) {
    spawnSync('ip', ['netns', 'del', n]);
    fs.rmSync(`/etc/netns/${n}`, {recursive: true, force: true});
  }
  fs.rmSync(tmp, {recursive: true, force: true});
}
process.on('exit', cleanup);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(signal, () => process.exit(1));
const ipx = (...args) => execFileSync('ip', args, {stdio: ['ignore', 'ignore', 'pipe']});
if (spawnSync('ip', ['netns', 'add', ns.coordinator]).status !== 0) skip('cannot create network namespaces');
for (const p of podNames) ipx('netns', 'add', ns[p]);
for (const n of Object.values(ns)) ipx('-n', n, 'link', 'set', 'lo', 'up');
podNames.forEach((p, i) => {
  const c = `${id}c${i}`;
  const n = `${id}n${i}`;
  ipx('link', 'add', c, 'type', 'veth', 'peer', 'name', n);
  ipx('link', 'set', c, 'netns', ns.coordinator);
  ipx('link', 'set', n, 'netns', ns[p]);
  ipx('-n', ns.coordinator, 'addr', 'add', `10.79.${i}.1/24`, 'dev', c);
  ipx('-n', ns.coordinator, 'link', 'set', c, 'up');
  ipx('-n', ns[p], 'addr', 'add', `${podIp[p]}/24`, 'dev', n);
  ipx('-n', ns[p], 'link', 'set', n, 'up');
});
const hosts = ['127.0.0.1 localhost', `${podIp.coordinator} colibri colibri.colibri`]
    .concat(podNames.map((p) => `${podIp[p]} ${p}.colibri-nodes ${p}.colibri-nodes.colibri.svc.cluster.local`))
    .join('\n') + '\n';
for (const n of Object.values(ns)) {
  fs.mkdirSync(`/etc/netns/${n}`, {recursive: true});
  fs.writeFileSync(`/etc/netns/${n}/hosts`, hosts);
}

// --- Containers as kubelet runs them: env with $(VAR) expanded in args.
function containerCommand(container, pod) {
  const env = {};
  for (const e of container.env || []) {
    env[e.name] = e.valueFrom && e.valueFrom.fieldRef && e.valueFrom.fieldRef.fieldPath === 'metadata.name'
        ? pod : mapPaths(e.value, pod);
  }
  const argv = (container.command || []).concat(container.args || [])
      .map((a) => mapPaths(a.replace(/\$\((\w+)\)/g, (m, n) => (n in env ? env[n] : m)), pod));
  if (bin[argv[0]]) argv[0] = bin[argv[0]];
  return {argv, env};
}
function start(pod, container, log) {
  const {argv, env} = containerCommand(container, pod);
  writeConfig(pod);
  const out = fs.openSync(path.join(podDir(pod), log), 'w');
  const child = spawn('ip', ['netns', 'exec', ns[pod], ...argv],
      {env: {...process.env, ...env}, stdio: ['ignore', out, out]});
  children.push(child);
  return child;
}
const readLog = (pod, log) => {
  try { return fs.readFileSync(path.join(podDir(pod), log), 'utf8'); } catch (e) { return ''; }
};

// --- Probes as kubelet runs them; the result and what it saw.
function runProbe(probe, pod, fromNs) {
  const timeout = String(probe.timeoutSeconds || 1);
  const container = pod === 'coordinator' ? coord.spec.template.spec.containers[0] : nodes.spec.template.spec.containers[0];
  const port = (p) => (typeof p === 'number' ? p : (container.ports.find((x) => x.name === p) || {}).containerPort);
  if (probe.httpGet) {
    const g = probe.httpGet;
    const url = `${(g.scheme || 'HTTP').toLowerCase()}://${podIp[pod]}:${port(g.port)}${g.path || '/'}`;
    const r = spawnSync('ip', ['netns', 'exec', fromNs, 'curl', '-s', '-o', '/dev/null', '-w', '%{http_code}',
      '--max-time', timeout, url], {encoding: 'utf8'});
    const code = Number(r.stdout);
    return {ok: code >= 200 && code < 400, saw: `GET ${url}: ${r.stdout || r.stderr}`};
  }
  if (probe.exec) {
    const {argv} = containerCommand({command: probe.exec.command}, pod);
    const r = spawnSync('ip', ['netns', 'exec', ns[pod], ...argv], {encoding: 'utf8', timeout: 1000 * timeout});
    return {ok: r.status === 0, saw: `exec ${argv.join(' ')}: ${r.status} ${r.stdout}${r.stderr}`};
  }
  if (probe.grpc) {
    // kubelet's gRPC probe: plaintext, no token, no client certificate.
    const r = spawnSync('ip', ['netns', 'exec', fromNs, bin['colibri-client'], '--coordinator',
      `${podIp[pod]}:${port(probe.grpc.port)}`, 'health'], {encoding: 'utf8', timeout: 1000 * Math.max(5, timeout)});
    return {ok: r.status === 0, saw: `grpc ${podIp[pod]}:${port(probe.grpc.port)}: ${r.stdout}${r.stderr}`};
  }
  if (probe.tcpSocket) {
    const r = spawnSync('ip', ['netns', 'exec', fromNs, 'bash', '-c',
      `exec 3<>/dev/tcp/${podIp[pod]}/${port(probe.tcpSocket.port)}`], {timeout: 1000 * timeout});
    return {ok: r.status === 0, saw: `tcp ${port(probe.tcpSocket.port)}: ${r.status}`};
  }
  return {ok: false, saw: `unknown probe ${JSON.stringify(probe)}`};
}
// All waiting together ends well within CTest's timeout (300 s), so that the
// exit handler always removes the namespaces.
const waitUntil = Date.now() + 150 * 1000;
async function eventually(probe, pod, fromNs, seconds) {
  let last;
  for (let i = 0; i < seconds * 4 && (i === 0 || Date.now() < waitUntil); i++) {
    last = runProbe(probe, pod, fromNs);
    if (last.ok) return last;
    await sleep(250);
  }
  return last;
}
const probeKinds = ['startupProbe', 'livenessProbe', 'readinessProbe'];

(async () => {
  // Node pods: init containers in order (waiting for the model, importing
  // the share), then the server.
  const nodeSpec = nodes.spec.template.spec;
  await Promise.all(podNames.map(async (pod) => {
    for (const init of nodeSpec.initContainers || []) {
      const child = start(pod, init, `init-${init.name}.log`);
      const code = await new Promise((r) => child.on('exit', r));
      if (code !== 0) fail(`${pod}: init container ${init.name} exited ${code}: ${readLog(pod, `init-${init.name}.log`)}`);
    }
    start(pod, nodeSpec.containers[0], 'node.log');
  }));
  const nodeContainer = nodeSpec.containers[0];
  for (const pod of podNames) {
    for (const kind of probeKinds) {
      if (!nodeContainer[kind]) continue;
      const r = await eventually(nodeContainer[kind], pod, ns.coordinator, 30);
      if (!r.ok) fail(`${pod}: ${kind} never passed (${r.saw})\n${readLog(pod, 'node.log')}`);
      else console.log(`ok: ${pod} ${kind}: ${r.saw}`);
    }
    // What the manifests probed before: plaintext gRPC on the TLS port.
    const old = runProbe({grpc: {port: 'grpc'}, timeoutSeconds: 5}, pod, ns.coordinator);
    if (old.ok) fail(`${pod}: a plaintext gRPC probe of the TLS port passed: the control is blind`);
  }

  // The coordinator pod (its init container only waits for DNS; the names
  // resolve from the hosts file).
  const coordContainer = coord.spec.template.spec.containers[0];
  const coordinator = start('coordinator', coordContainer, 'coordinator.log');
  // kubelet probes the coordinator from its host; here from a node's namespace.
  const viewpoint = ns[podNames[0]];
  for (const kind of probeKinds) {
    if (!coordContainer[kind]) {
      fail(`coordinator: no ${kind}`);
      continue;
    }
    const r = await eventually(coordContainer[kind], 'coordinator', viewpoint, 60);
    if (!r.ok) fail(`coordinator: ${kind} never passed (${r.saw})\n${readLog('coordinator', 'coordinator.log')}`);
    else console.log(`ok: coordinator ${kind}: ${r.saw}`);
  }
  if (runProbe({grpc: {port: 'grpc'}, timeoutSeconds: 5}, 'coordinator', viewpoint).ok) {
    fail('coordinator: a plaintext gRPC probe of the TLS port passed: the control is blind');
  }

  // No node left: a request makes the coordinator find out, and readiness
  // must fail (liveness must not: a restart would not bring the nodes back).
  for (const c of children) {
    if (c !== coordinator) try { process.kill(c.pid, 'SIGKILL'); } catch (e) { /* gone */ }
  }
  const client = spawnSync('ip', ['netns', 'exec', viewpoint, bin['colibri-client'], '--coordinator', 'colibri:7070',
    '--auth-token-file', `${lab}/token`, '--tls-ca', `${lab}/ca.crt`, 'generate', '-n', '2', 'hello'],
  {encoding: 'utf8', timeout: 60000});
  const notReady = await (async () => {
    for (let i = 0; i < 60; i++) {
      if (!runProbe(coordContainer.readinessProbe, 'coordinator', viewpoint).ok) return true;
      await sleep(250);
    }
    return false;
  })();
  if (coordinator.exitCode !== null) {
    fail(`coordinator: exited (${coordinator.exitCode})\n${readLog('coordinator', 'coordinator.log')}`);
  } else if (!notReady) {
    fail(`coordinator: still ready with every node gone (client: ${client.status} ${client.stderr})\n` +
         readLog('coordinator', 'coordinator.log'));
  } else {
    console.log('ok: coordinator not ready with every node gone');
  }
  if (!runProbe(coordContainer.livenessProbe, 'coordinator', viewpoint).ok) fail('coordinator: not live with every node gone');

  console.log(failures ? `${failures} failed` : 'all probes passed');
  process.exit(failures ? 1 : 0);
})().catch((e) => {
  console.log(`FAIL: ${e.stack}`);
  process.exit(1);
});
