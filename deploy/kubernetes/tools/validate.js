#!/usr/bin/env node
// Validates Kubernetes manifests against the API's schemas:
//   node validate.js [--node-modules DIR] FILE|- ...
// Each YAML document of each file (a kustomize rendering, a manifest) is
// checked by its apiVersion and kind:
//  - Kubernetes kinds: the API's OpenAPI schemas (npm kubernetes-models),
//    strict about unknown fields (k8s.js);
//  - KServe's ServingRuntime, ClusterServingRuntime and InferenceService:
//    the schemas of its CRDs (kserve.js), embedded Kubernetes types as above;
//  - a ConfigMap labelled app.kubernetes.io/name: prometheus-adapter: also
//    its config.yaml, against the adapter's configuration schema (adapter.js).
// A kind with no schema here is an error, never skipped. Prints one line a
// document ("ok FILE Kind/name" or its errors); exits 1 when any failed.
// The packages come from DIR (default: third_party/k8s-validate/node_modules
// of the source tree, installed by scripts/deps.sh).
"use strict";

const fs = require("fs");
const path = require("path");

const args = process.argv.slice(2);
let nodeModules = path.resolve(__dirname, "../../../third_party/k8s-validate/node_modules");
const files = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--node-modules") nodeModules = path.resolve(args[++i]);
  else files.push(args[i]);
}
if (files.length === 0) {
  process.stderr.write("usage: validate.js [--node-modules DIR] FILE|- ...\n");
  process.exit(2);
}
if (!fs.existsSync(path.join(nodeModules, "kubernetes-models"))) {
  process.stderr.write(`validate.js: ${nodeModules}/kubernetes-models is missing: run scripts/deps.sh\n`);
  process.exit(2);
}
const need = (name) => require(path.join(nodeModules, name));
const YAML = need("yaml");
const Ajv = need("ajv").default;
const { Strict } = require("./k8s.js");
const kserve = require("./kserve.js");
const adapter = require("./adapter.js");

const strict = new Strict(nodeModules);
const ajv = new Ajv({ allErrors: true, strict: true, formats: { regex: isRegex } });
kserve.addKeywords(ajv, strict);
const crd = {};
for (const [key, schema] of Object.entries(kserve.schemas)) crd[key] = ajv.compile(schema);
const adapterConfig = ajv.compile(adapter.config);

function isRegex(s) {
  try {
    new RegExp(s);
    return true;
  } catch (e) {
    return false;
  }
}

function ajvErrors(fn, prefix = "") {
  return (fn.errors || []).map((e) => {
    let msg = e.message;
    if (e.keyword === "additionalProperties") msg = `unknown field "${e.params.additionalProperty}"`;
    if (e.keyword === "enum") msg += ": " + e.params.allowedValues.join(", ");
    return `${prefix}${e.instancePath || "/"}: ${msg}`;
  });
}

function check(doc) {
  if (doc === null || typeof doc !== "object" || Array.isArray(doc))
    return ["/: not an object (a Kubernetes object has apiVersion, kind and metadata)"];
  if (typeof doc.apiVersion !== "string" || typeof doc.kind !== "string")
    return ["/: apiVersion and kind must be strings"];
  const key = `${doc.apiVersion} ${doc.kind}`;
  if (doc.apiVersion.startsWith("serving.kserve.io/")) {
    const fn = crd[key];
    if (!fn) return [`/: no schema for ${key} (known: ${Object.keys(crd).join(", ")})`];
    return fn(doc) ? [] : ajvErrors(fn);
  }
  const errors = strict.validateObject(doc);
  const labels = (doc.metadata && doc.metadata.labels) || {};
  if (errors.length === 0 && doc.kind === "ConfigMap" &&
      labels["app.kubernetes.io/name"] === "prometheus-adapter") {
    const text = doc.data && doc.data["config.yaml"];
    if (typeof text !== "string") return ["/data: no config.yaml for prometheus-adapter"];
    let cfg;
    try {
      cfg = YAML.parse(text, { uniqueKeys: true });
    } catch (e) {
      return [`/data/config.yaml: not YAML: ${e.message}`];
    }
    if (!adapterConfig(cfg)) return ajvErrors(adapterConfig, "/data/config.yaml");
  }
  return errors;
}

let failed = 0;
let count = 0;
for (const file of files) {
  const text = fs.readFileSync(file === "-" ? 0 : file, "utf8");
  const docs = YAML.parseAllDocuments(text, { uniqueKeys: true });
  for (const d of docs) {
    const where = file === "-" ? "<stdin>" : file;
    if (d.errors && d.errors.length) {
      failed++;
      for (const e of d.errors) console.log(`FAIL ${where}: not YAML: ${e.message}`);
      continue;
    }
    const doc = d.toJS();
    if (doc === null) continue; // an empty document (a trailing ---)
    count++;
    const name = `${doc.kind}/${(doc.metadata && doc.metadata.name) || "?"}`;
    const errors = check(doc);
    if (errors.length) {
      failed++;
      for (const e of errors) console.log(`FAIL ${where} ${name} ${e}`);
    } else {
      console.log(`ok ${where} ${name}`);
    }
  }
}
console.log(`${count} objects, ${failed} invalid`);
process.exit(failed || count === 0 ? 1 : 0);
