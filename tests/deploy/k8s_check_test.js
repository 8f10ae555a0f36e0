// Offline checks of k8s/: every overlay renders with `kubectl kustomize`,
// every rendered object passes kubernetes-models' validate() (types,
// required fields, formats) and has no field its Kubernetes type does not
// declare (k8s_fields.js), yamllint passes on k8s/, and the structure the
// deployment relies on holds. A copy of k8s/ with a misspelled field must
// fail. Usage: node k8s_check_test.js SOURCE_DIR. kubectl and yamllint are
// found on PATH; without one, its part is skipped with a message.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const {execFileSync} = require('child_process');
const YAML = require('yaml');
const {unknownFields, kindDts} = require('./k8s_fields.js');

const src = process.argv[2];
function onPath(tool) {
  try {
    return execFileSync('sh', ['-c', `command -v ${tool}`], {encoding: 'utf8'}).trim();
  } catch (e) {
    return '';
  }
}
const kubectl = onPath('kubectl');
const yamllint = onPath('yamllint');
const k8s = path.join(src, 'k8s');
const projectVersion = (fs.readFileSync(path.join(src, 'CMakeLists.txt'), 'utf8')
    .match(/^project\(colibri VERSION ([0-9.]+)/m) || [])[1];
let failures = 0;
let checks = 0;
function check(ok, what) {
  checks++;
  if (!ok) {
    failures++;
    console.log(`FAIL: ${what}`);
  }
  return ok;
}

function render(dir) {
  const out = execFileSync(kubectl, ['kustomize', dir], {encoding: 'utf8'});
  return YAML.parseAllDocuments(out).map((d) => d.toJS()).filter((o) => o);
}

// Schema problems of one object.
function objectProblems(obj) {
  const name = `${obj.kind}/${obj.metadata && obj.metadata.name}`;
  let Model;
  try {
    Model = require(`kubernetes-models/${obj.apiVersion}/${obj.kind}`)[obj.kind];
  } catch (e) {
    return [`${name}: no model for ${obj.apiVersion} ${obj.kind}`];
  }
  const problems = [];
  try {
    new Model(obj).validate();
  } catch (e) {
    problems.push(`${name}: ${e.message}`);
  }
  return problems.concat(unknownFields(obj, kindDts(obj.apiVersion, obj.kind), name, []));
}

const byKind = (objs, kind) => objs.filter((o) => o.kind === kind);
const matches = (selector, labels) =>
  Object.entries(selector || {}).every(([k, v]) => (labels || {})[k] === v);

function structureProblems(objs, overlay) {
  const p = [];
  const sts = byKind(objs, 'StatefulSet');
  const deps = byKind(objs, 'Deployment');
  if (sts.length !== 1 || deps.length !== 1) return ['expected one StatefulSet and one Deployment'];
  const nodes = sts[0];
  const coord = deps[0];
  const nodePod = nodes.spec.template;
  if (nodes.spec.podManagementPolicy !== 'Parallel') p.push('nodes: podManagementPolicy not Parallel');
  // Every node pod has its own PVC, mounted where the node keeps its store.
  const claims = (nodes.spec.volumeClaimTemplates || []).map((c) => c.metadata.name);
  const node = nodePod.spec.containers[0];
  const dataMount = (node.volumeMounts || []).find((m) => m.mountPath === '/var/lib/colibri/node');
  if (!dataMount || !claims.includes(dataMount.name)) p.push('node store is not a volumeClaimTemplate');
  // The import init step: the node's own share into the same store, from the
  // model volume, among exactly the StatefulSet's pod names, with the
  // coordinator's replicas, and every volume its config needs.
  const imp = (nodePod.spec.initContainers || []).find((c) => (c.args || []).includes('--import-share-of'));
  if (!imp) {
    p.push('nodes: no init container importing the node share (--import-share-of)');
  } else {
    const arg = (flag) => imp.args[imp.args.indexOf(flag) + 1];
    const env = (name) => ((imp.env || []).find((e) => e.name === name) || {}).value;
    const expand = (v) => String(v).replace(/\$\((\w+)\)/g, (_, n) => env(n));
    if (!imp.args.includes('--exit-after-import')) p.push('import-share: no --exit-after-import');
    if (arg('--node-id') !== node.args[node.args.indexOf('--node-id') + 1]) p.push('import-share: --node-id differs from the node\'s');
    const mount = (c, where) => (c.volumeMounts || []).find((m) => m.mountPath === where);
    const impData = mount(imp, '/var/lib/colibri/node');
    if (!impData || impData.name !== dataMount.name) p.push('import-share: does not write the node store volume');
    const gguf = arg('--import-gguf') || '';
    const models = (imp.volumeMounts || []).find((m) => gguf.startsWith(m.mountPath + '/'));
    if (!models || !(nodePod.spec.volumes || []).some((v) => v.name === models.name)) p.push('import-share: --import-gguf is not on a mounted volume');
    const ids = Array.from({length: nodes.spec.replicas}, (_, i) => `${nodes.metadata.name}-${i}`).join(',');
    if (expand(arg('--import-share-of')) !== ids) p.push(`import-share: ids '${expand(arg('--import-share-of'))}' are not the pods '${ids}'`);
    const coordToml = (byKind(objs, 'ConfigMap').find((c) => c.metadata.name.startsWith('colibri-config')) || {data: {}}).data['coordinator.toml'] || '';
    const r = (coordToml.match(/^replicas = (\d+)$/m) || [])[1];
    if (expand(arg('--import-replicas')) !== r) p.push(`import-share: replicas ${expand(arg('--import-replicas'))} != the coordinator's ${r}`);
    for (const m of node.volumeMounts || []) {
      if (m.mountPath !== '/tmp' && !mount(imp, m.mountPath)) p.push(`import-share: does not mount ${m.mountPath} as the node does`);
    }
  }
  // Probes: plaintext HTTP on the health port the config opens
  // (health-listen), /healthz for start-up and liveness, /readyz for
  // readiness; a start-up probe on the coordinator (loading outlasts
  // liveness). Every pod: seccomp RuntimeDefault (Pod Security "restricted"),
  // every container a fixed image tag that is not pulled again.
  const configToml = (name) => ((byKind(objs, 'ConfigMap').find((c) => c.metadata.name.startsWith('colibri-config')) || {data: {}}).data[name] || '');
  for (const [what, pod, toml] of [['node', nodePod, 'expert-node.toml'], ['coordinator', coord.spec.template, 'coordinator.toml']]) {
    const c = pod.spec.containers[0];
    const listen = (configToml(toml).match(/^health-listen = "0\.0\.0\.0:(\d+)"$/m) || [])[1];
    const healthPort = (c.ports || []).find((x) => x.name === 'health');
    if (!listen || !healthPort || String(healthPort.containerPort) !== listen) {
      p.push(`${what}: no container port 'health' equal to ${toml}'s health-listen on 0.0.0.0`);
    }
    const wanted = {startupProbe: '/healthz', livenessProbe: '/healthz', readinessProbe: '/readyz'};
    for (const [probe, path] of Object.entries(wanted)) {
      const g = c[probe] && c[probe].httpGet;
      if (what === 'node' && probe === 'startupProbe' && !c[probe]) continue;
      if (!g || g.path !== path || g.port !== 'health' || (g.scheme || 'HTTP') !== 'HTTP') {
        p.push(`${what}: ${probe} is not GET ${path} on the health port`);
      }
    }
    const startup = c.startupProbe || {};
    if (what === 'coordinator' && (startup.periodSeconds || 10) * (startup.failureThreshold || 3) < 600) {
      p.push('coordinator: the start-up probe gives loading less than 10 minutes');
    }
    if (!c.resources || !c.resources.requests || !c.resources.limits) {
      p.push(`${what}: no resource requests and limits`);
    }
    // The node's memory limit is what `colibri-coordinator plan` recommends
    // for a node whose experts fill its RAM tier: ram-budget + 1 GiB,
    // rounded up to a whole GiB (RecommendedNodeMemoryLimit).
    if (what === 'node') {
      const budget = (configToml(toml).match(/^ram-budget = "(\d+)G"$/m) || [])[1];
      const limit = ((c.resources || {}).limits || {}).memory;
      if (!budget || limit !== `${Number(budget) + 1}Gi`) {
        p.push(`node: limits.memory ${limit} is not ${toml}'s ram-budget ${budget}G + 1Gi (plan's MemoryMax)`);
      }
    }
    const seccomp = pod.spec.securityContext && pod.spec.securityContext.seccompProfile;
    if (!seccomp || seccomp.type !== 'RuntimeDefault') p.push(`${what}: pod seccompProfile is not RuntimeDefault`);
    for (const k of (pod.spec.initContainers || []).concat(pod.spec.containers)) {
      const tag = (k.image.match(/:([^:/]+)$/) || [])[1];
      if (tag !== projectVersion) p.push(`${what}/${k.name}: image ${k.image} is not tagged ${projectVersion} (build-local.sh --keep's tag)`);
      if (k.imagePullPolicy !== 'IfNotPresent') p.push(`${what}/${k.name}: imagePullPolicy is not IfNotPresent`);
    }
  }
  // Spread over machines.
  const spread = (nodePod.spec.topologySpreadConstraints || [])
      .some((t) => t.topologyKey === 'kubernetes.io/hostname');
  const anti = nodePod.spec.affinity && nodePod.spec.affinity.podAntiAffinity;
  if (!spread && !anti) p.push('nodes: no topology spread or anti-affinity');
  // The headless Service selects the node pods, and is the StatefulSet's.
  const headless = byKind(objs, 'Service').find((s) => s.spec.clusterIP === 'None');
  if (!headless) {
    p.push('no headless Service');
  } else {
    if (!matches(headless.spec.selector, nodePod.metadata.labels)) p.push('headless Service does not select the node pods');
    if (matches(headless.spec.selector, coord.spec.template.metadata.labels)) p.push('headless Service selects the coordinator');
    if (nodes.spec.serviceName !== headless.metadata.name) p.push('StatefulSet serviceName is not the headless Service');
  }
  const front = byKind(objs, 'Service').find((s) => matches(s.spec.selector, coord.spec.template.metadata.labels) && s.spec.clusterIP !== 'None');
  const frontPorts = front ? front.spec.ports.map((x) => x.name) : [];
  if (!frontPorts.includes('grpc') || !frontPorts.includes('http')) p.push('no Service with grpc and http ports for the coordinator');
  // A PDB over the nodes.
  if (!byKind(objs, 'PodDisruptionBudget').some((b) => matches(b.spec.selector.matchLabels, nodePod.metadata.labels))) {
    p.push('no PodDisruptionBudget over the nodes');
  }
  // The generated Secret and ConfigMap are used by both.
  const secret = byKind(objs, 'Secret').find((s) => s.metadata.name.startsWith('colibri-token'));
  const config = byKind(objs, 'ConfigMap').find((s) => s.metadata.name.startsWith('colibri-config'));
  for (const [what, pod] of [['node', nodePod], ['coordinator', coord.spec.template]]) {
    const vols = pod.spec.volumes || [];
    if (!secret || !vols.some((v) => v.secret && v.secret.secretName === secret.metadata.name)) p.push(`${what} does not mount the token Secret`);
    if (!config || !vols.some((v) => v.configMap && v.configMap.name === config.metadata.name)) p.push(`${what} does not mount the config ConfigMap`);
    if (JSON.stringify(pod).match(/--auth-token[^-]|"value":"[0-9a-f]{64}"/)) p.push(`${what}: a secret on the command line or in env`);
  }
  if (secret && secret.metadata.name === 'colibri-token') p.push('Secret is not generated (no hash suffix)');
  if (overlay === 'production') {
    // The gRPC port: from the coordinator only; any other rule opens the
    // health port alone.
    const np = byKind(objs, 'NetworkPolicy');
    const grpcPort = (node.ports.find((x) => x.name === 'grpc') || {}).containerPort;
    const healthPort = (node.ports.find((x) => x.name === 'health') || {}).containerPort;
    const ports = (rule) => (rule.ports || []).map((x) => x.port);
    const ok = np.some((n) => matches(n.spec.podSelector.matchLabels, nodePod.metadata.labels) &&
        (n.spec.policyTypes || []).includes('Ingress') &&
        n.spec.ingress.some((r) => ports(r).includes(grpcPort) && r.from &&
            r.from.every((f) => f.podSelector && matches(f.podSelector.matchLabels, coord.spec.template.metadata.labels))) &&
        n.spec.ingress.every((r) => (r.from && r.from.every((f) => f.podSelector && matches(f.podSelector.matchLabels, coord.spec.template.metadata.labels))) ||
            (ports(r).length > 0 && ports(r).every((x) => x === healthPort))));
    if (!ok) p.push('production: no NetworkPolicy letting only the coordinator reach the nodes\' gRPC port');
    // Scraping without a token: the health port, with health-metrics on.
    for (const [what, pod, toml] of [['node', nodePod, 'expert-node.toml'], ['coordinator', coord.spec.template, 'coordinator.toml']]) {
      const ann = pod.metadata.annotations || {};
      const health = (pod.spec.containers[0].ports || []).find((x) => x.name === 'health') || {};
      if (ann['prometheus.io/scrape'] !== 'true' || ann['prometheus.io/path'] !== '/metrics' ||
          ann['prometheus.io/port'] !== String(health.containerPort)) {
        p.push(`production: ${what} scrape annotations do not name /metrics on the health port`);
      }
      if (!/^health-metrics = true$/m.test(configToml(toml))) p.push(`production: ${toml} lacks health-metrics = true`);
    }
    if (nodes.spec.replicas <= 3) p.push('production: not more node replicas than the base');
    if (!JSON.stringify(config).includes('tls-cert')) p.push('production: no TLS in the config');
  }
  return p;
}

if (!kubectl) {
  console.log('SKIP (part): kubectl not found: overlays not rendered');
} else {
  const overlays = fs.readdirSync(path.join(k8s, 'overlays')).sort();
  check(overlays.includes('homelab') && overlays.includes('production'), `overlays: ${overlays}`);
  for (const overlay of overlays) {
    let objs = [];
    try {
      objs = render(path.join(k8s, 'overlays', overlay));
    } catch (e) {
      check(false, `${overlay}: kubectl kustomize failed: ${e.message}`);
      continue;
    }
    console.log(`${overlay}: ${objs.length} objects`);
    for (const obj of objs) {
      const problems = objectProblems(obj);
      check(problems.length === 0, `${overlay}: ${problems.join('; ')}`);
    }
    const s = structureProblems(objs, overlay);
    check(s.length === 0, `${overlay}: ${s.join('; ')}`);
  }
  // A broken copy: a misspelled field must fail.
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'colibri-k8s-'));
  try {
    fs.cpSync(k8s, path.join(tmp, 'k8s'), {recursive: true});
    const file = path.join(tmp, 'k8s', 'base', 'nodes-statefulset.yaml');
    const text = fs.readFileSync(file, 'utf8');
    fs.writeFileSync(file, text.replace('          livenessProbe:', '          livenesProbe:'));
    const objs = render(path.join(tmp, 'k8s', 'overlays', 'homelab'));
    const problems = objs.flatMap(objectProblems);
    check(problems.some((x) => x.includes("unknown field 'livenesProbe'")),
          'a misspelled field in a copy was not reported: the check is blind');
    const wrongType = YAML.parse(YAML.stringify(objs.find((o) => o.kind === 'StatefulSet')));
    wrongType.spec.replicas = 'three';
    check(objectProblems(wrongType).length > 0, 'a string replicas passed validate()');
  } finally {
    fs.rmSync(tmp, {recursive: true, force: true});
  }
}

if (!yamllint) {
  console.log('SKIP (part): yamllint not found (Debian package yamllint)');
} else {
  try {
    execFileSync(yamllint, ['--strict', '-c', path.join(__dirname, 'yamllint.yaml'), k8s,
                            path.join(src, 'deploy')], {encoding: 'utf8'});
    check(true, '');
  } catch (e) {
    check(false, `yamllint:\n${e.stdout}`);
  }
}

console.log(`${checks - failures} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
