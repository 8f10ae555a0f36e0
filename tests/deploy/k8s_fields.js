// Unknown-field check for Kubernetes objects. kubernetes-models' validate()
// checks types, required fields and formats but lets unknown fields through
// (its schemas do not close objects), so a misspelled field such as
// `livenesProbe` would pass. The package's TypeScript declarations list every
// field of every type; this walks an object along them and reports each field
// its type does not declare, with its path. Types written inline in the
// declarations (a few lists of small objects) are not looked into.
'use strict';
const fs = require('fs');
const path = require('path');

const parsed = new Map();  // .d.ts path -> {fields: Map(name -> type) | null, imports}

function parseDts(file) {
  if (parsed.has(file)) return parsed.get(file);
  const text = fs.readFileSync(file, 'utf8');
  const imports = new Map();
  for (const m of text.matchAll(/^import \{ (\w+)(?: as \w+)? \} from "([^"]+)";$/gm)) {
    imports.set(m[1], m[2]);
  }
  let fields = null;
  const start = text.search(/^export interface \w+(?: extends [\w, ]+)? \{$/m);
  if (start >= 0) {
    fields = new Map();
    const header = text.slice(start, text.indexOf('\n', start));
    if (/extends .*TypeMeta/.test(header)) {
      fields.set('apiVersion', 'string');
      fields.set('kind', 'string');
    }
    // Fields sit at four spaces; a type spanning lines ends at the next line
    // at four spaces. Comments are dropped first.
    const lines = text.slice(start, text.indexOf('\n}', start)).split('\n')
                      .filter((l) => !/^\s*(\/\*\*|\*)/.test(l));
    let name = null;
    let type = '';
    for (const line of lines.slice(1)) {
      const m = line.match(/^    "([^"]+)"\??: (.*)$/);
      if (m) {
        name = m[1];
        type = m[2];
      } else if (name !== null) {
        type += ' ' + line.trim();
      }
      if (name !== null && /^    \S/.test(line) && type.endsWith(';')) {
        fields.set(name, type.slice(0, -1).replace(/\s+/g, ' '));
        name = null;
      }
    }
  }
  const result = {fields, imports};
  parsed.set(file, result);
  return result;
}

function resolveImport(fromFile, spec) {
  if (spec.startsWith('.')) return path.resolve(path.dirname(fromFile), spec + '.d.ts');
  // A package path: the nearest node_modules above the importing file (the
  // packages' "exports" maps hide .d.ts files from require.resolve).
  for (let dir = path.dirname(fromFile); dir !== path.dirname(dir); dir = path.dirname(dir)) {
    const candidate = path.join(dir, 'node_modules', spec + '.d.ts');
    if (fs.existsSync(candidate)) return candidate;
  }
  throw new Error(`cannot find ${spec}.d.ts from ${fromFile}`);
}

// Problems ("path: unknown field 'x'") of `value` against the type declared
// in `file`.
function unknownFields(value, file, where, out) {
  const {fields, imports} = parseDts(file);
  if (fields === null || value === null || typeof value !== 'object' || Array.isArray(value)) {
    return out;
  }
  for (const [key, child] of Object.entries(value)) {
    const type = fields.get(key);
    const here = `${where}.${key}`;
    if (type === undefined) {
      out.push(`${here}: unknown field '${key}'`);
      continue;
    }
    let m;
    if ((m = type.match(/^Array<(\w+)>$/)) && imports.has(m[1]) && Array.isArray(child)) {
      const ref = resolveImport(file, imports.get(m[1]));
      child.forEach((item, i) => unknownFields(item, ref, `${here}[${i}]`, out));
    } else if ((m = type.match(/^\{\s*\[key: string\]: (\w+);?\s*\}$/)) && imports.has(m[1])) {
      const ref = resolveImport(file, imports.get(m[1]));
      for (const [k, v] of Object.entries(child || {})) unknownFields(v, ref, `${here}.${k}`, out);
    } else if (imports.has(type)) {
      unknownFields(child, resolveImport(file, imports.get(type)), here, out);
    }
  }
  return out;
}

// The .d.ts of a kind, e.g. ("apps/v1", "StatefulSet").
function kindDts(apiVersion, kind) {
  return path.join(__dirname, 'node_modules', 'kubernetes-models', apiVersion, `${kind}.d.ts`);
}

module.exports = {unknownFields, kindDts};
