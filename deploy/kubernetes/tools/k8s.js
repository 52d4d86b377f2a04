// Validation of Kubernetes objects against the API's OpenAPI schemas, as
// compiled into the npm package kubernetes-models (types, formats, enums,
// required fields), made strict: a field the schema does not define is an
// error, as `kubectl apply --validate=strict` makes it.
//
// kubernetes-models' validators read each property their schema defines
// (data.spec, data.template, ...) and walk every key of a map; they ignore
// the others. The object is given to them behind a Proxy that records every
// key read: a key of an object that no validator read is unknown.
"use strict";

const path = require("path");

function loadModules(nodeModules) {
  // The API groups' types, and apimachinery's (ObjectMeta, Quantity...).
  const api = path.join(nodeModules, "kubernetes-models", "_schemas");
  const meta = path.join(nodeModules, "@kubernetes-models", "apimachinery", "_schemas");
  return {
    schemaPath: (name) =>
      path.join(name.startsWith("IoK8sApimachinery") ? meta : api, name + ".js"),
  };
}

// apiVersion + kind -> the schema's name in kubernetes-models, e.g.
// apps/v1 Deployment -> IoK8sApiAppsV1Deployment, v1 Service ->
// IoK8sApiCoreV1Service, policy/v1 PodDisruptionBudget ->
// IoK8sApiPolicyV1PodDisruptionBudget.
function schemaName(apiVersion, kind) {
  const cap = (s) => s.charAt(0).toUpperCase() + s.slice(1);
  const parts = String(apiVersion).split("/");
  const group = parts.length === 2 ? parts[0] : "core";
  const version = parts.length === 2 ? parts[1] : parts[0];
  // Groups under k8s.io drop that suffix and join the rest:
  // networking.k8s.io -> Networking, rbac.authorization.k8s.io -> RbacAuthorization.
  const g = group.replace(/\.k8s\.io$/, "").split(".").map(cap).join("");
  return "IoK8sApi" + g + cap(version) + cap(kind);
}

// kubernetes-models' validators are compiled without messages: say what
// was expected from the keyword and its parameters.
function message(e) {
  const p = e.params || {};
  switch (e.keyword) {
    case "type": return `must be ${p.type}`;
    case "required": return `must have the required field "${p.missingProperty}"`;
    case "enum": return `must be one of ${(p.allowedValues || []).join(", ")}`;
    case "format": return `must be a ${p.format}`;
    case "pattern": return `must match ${p.pattern}`;
    case "oneOf": return "must be one of the forms the schema allows (see the errors above)";
    case "minimum": case "maximum": return `must be ${p.comparison} ${p.limit}`;
    default: return e.message || `fails ${e.keyword} ${JSON.stringify(p)}`;
  }
}

class Strict {
  constructor(nodeModules) {
    this.m = loadModules(nodeModules);
    this.cache = new Map();
  }

  validator(name) {
    if (!this.cache.has(name)) {
      let fn = null;
      try {
        fn = require(this.m.schemaPath(name)).validate;
      } catch (e) {
        if (e.code !== "MODULE_NOT_FOUND") throw e;
      }
      this.cache.set(name, fn);
    }
    return this.cache.get(name);
  }

  // Validates obj as the schema `name`; returns a list of error strings,
  // each "PATH: message" with PATH under `at` (a JSON pointer).
  validate(name, obj, at = "") {
    const fn = this.validator(name);
    if (!fn) return [`${at || "/"}: no schema ${name} in kubernetes-models`];
    const seen = new WeakMap();
    const proxies = new WeakMap();
    const track = (o) => {
      if (o === null || typeof o !== "object") return o;
      if (proxies.has(o)) return proxies.get(o);
      const keys = new Set();
      seen.set(o, keys);
      const p = new Proxy(o, {
        get(t, k, r) {
          if (typeof k === "string") keys.add(k);
          return track(Reflect.get(t, k, r));
        },
      });
      proxies.set(o, p);
      return p;
    };
    const errors = [];
    if (!fn(track(obj))) {
      for (const e of fn.errors || []) {
        const p = `${at}${e.instancePath || ""}`;
        errors.push(`${p || "/"}: ${message(e)}`);
      }
    }
    const walk = (o, p) => {
      if (o === null || typeof o !== "object") return;
      const keys = seen.get(o);
      if (!keys) return; // inside a value with an error above, or a free-form value
      for (const k of Object.keys(o)) {
        const kp = `${p}/${k.replace(/~/g, "~0").replace(/\//g, "~1")}`;
        if (!Array.isArray(o) && !keys.has(k)) errors.push(`${kp}: unknown field "${k}"`);
        else walk(o[k], kp);
      }
    };
    walk(obj, at);
    return errors;
  }

  // A whole object: its schema from apiVersion and kind.
  validateObject(doc) {
    const name = schemaName(doc.apiVersion, doc.kind);
    if (!this.validator(name)) return [`/: no schema for ${doc.apiVersion} ${doc.kind} (kubernetes-models has none)`];
    return this.validate(name, doc);
  }
}

module.exports = { Strict, schemaName };
