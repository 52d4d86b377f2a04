// Schemas of KServe's ServingRuntime (serving.kserve.io/v1alpha1) and
// InferenceService (serving.kserve.io/v1beta1), written from the
// openAPIV3Schema of KServe's CustomResourceDefinitions
// (config/crd/full/serving.kserve.io_servingruntimes.yaml and
// serving.kserve.io_inferenceservices.yaml in the kserve/kserve repository):
// the KServe fields with their types, bounds, enums and required fields.
// The Kubernetes types they embed (Container, Volume, Toleration, a
// predictor's PodSpec fields...) are checked by kubernetes-models (k8s.js).
// Strict: a field neither defines is an error.
//
// Two keywords join the two: {k8s: NAME} checks the value as the
// Kubernetes schema NAME; {k8sRest: NAME} checks the keys an object schema
// does not list as the schema NAME (KServe inlines a PodSpec into a
// predictor and a Container into its model), with k8sDefaults filling what
// that schema requires and KServe does not (a predictor's containers, a
// model's name).
"use strict";

const str = { type: "string" };
const bool = { type: "boolean" };
const int32 = { type: "integer", minimum: -2147483648, maximum: 2147483647 };
const int64 = { type: "integer" };
const strMap = { type: "object", additionalProperties: str };
const k8sList = (name) => ({ type: "array", items: { k8s: name } });
const core = (kind) => "IoK8sApiCoreV1" + kind;

const metadata = { k8s: "IoK8sApimachineryPkgApisMetaV1ObjectMeta" };

// ServingRuntimeSpec (ServingRuntimePodSpec inlined).
const servingRuntimeSpec = {
  type: "object",
  required: ["containers"],
  additionalProperties: false,
  properties: {
    affinity: { k8s: core("Affinity") },
    annotations: strMap,
    builtInAdapter: {
      type: "object",
      additionalProperties: false,
      properties: {
        env: k8sList(core("EnvVar")),
        memBufferBytes: int64,
        modelLoadingTimeoutMillis: int64,
        runtimeManagementPort: int64,
        serverType: str,
      },
    },
    containers: { type: "array", minItems: 1, items: { k8s: core("Container") } },
    disabled: bool,
    grpcDataEndpoint: str,
    grpcEndpoint: str,
    hostIPC: bool,
    httpDataEndpoint: str,
    imagePullSecrets: k8sList(core("LocalObjectReference")),
    labels: strMap,
    multiModel: bool,
    nodeSelector: strMap,
    protocolVersions: { type: "array", items: str },
    replicas: int64,
    resourceClaims: k8sList(core("PodResourceClaim")),
    schedulerName: str,
    storageHelper: {
      type: "object",
      additionalProperties: false,
      properties: { disabled: bool },
    },
    supportedModelFormats: {
      type: "array",
      items: {
        type: "object",
        required: ["name"],
        additionalProperties: false,
        properties: {
          autoSelect: bool,
          name: str,
          priority: { ...int32, minimum: 1 },
          version: str,
        },
      },
    },
    tolerations: k8sList(core("Toleration")),
    volumes: k8sList(core("Volume")),
    workerSpec: {
      type: "object", // containers required: PodSpec's own rule
      properties: {
        pipelineParallelSize: int64,
        tensorParallelSize: int64,
      },
      k8sRest: core("PodSpec"),
    },
  },
};

// ModelSpec: a Container (name optional) and the model's own fields.
const modelSpec = {
  type: "object",
  required: ["modelFormat"],
  properties: {
    modelFormat: {
      type: "object",
      required: ["name"],
      additionalProperties: false,
      properties: { name: str, version: str },
    },
    protocolVersion: str,
    runtime: str,
    runtimeVersion: str,
    storageUri: str,
    storage: {
      type: "object",
      additionalProperties: false,
      properties: { key: str, parameters: strMap, path: str, schemaPath: str },
    },
  },
  k8sRest: core("Container"),
  k8sDefaults: { name: "kserve-container" },
};

// The ComponentExtensionSpec fields every component (predictor, ...) has.
const extension = {
  minReplicas: int32,
  maxReplicas: int32,
  scaleMetric: { type: "string", enum: ["cpu", "memory", "concurrency", "rps"] },
  scaleMetricType: { type: "string", enum: ["Utilization", "Value", "AverageValue"] },
  scaleTarget: int32,
  containerConcurrency: int64,
  timeout: int64,
  canaryTrafficPercent: int64,
  annotations: strMap,
  labels: strMap,
  deploymentStrategy: { k8s: "IoK8sApiAppsV1DeploymentStrategy" },
  logger: {
    type: "object",
    additionalProperties: false,
    properties: {
      mode: { type: "string", enum: ["all", "request", "response"] },
      url: str,
      metadataHeaders: { type: "array", items: str },
    },
  },
  batcher: {
    type: "object",
    additionalProperties: false,
    properties: { maxBatchSize: int32, maxLatency: int32, timeout: int32 },
  },
  storageUris: {
    type: "array",
    items: {
      type: "object",
      required: ["uri"],
      additionalProperties: false,
      properties: { uri: str, mountPath: str },
    },
  },
};

const predictorSpec = {
  type: "object",
  properties: { ...extension, model: modelSpec },
  k8sRest: core("PodSpec"),
  k8sDefaults: { containers: [] },
};

const inferenceServiceSpec = {
  type: "object",
  required: ["predictor"],
  additionalProperties: false,
  properties: { predictor: predictorSpec },
};

function resource(apiVersion, kind, spec) {
  return {
    type: "object",
    required: ["apiVersion", "kind", "metadata", "spec"],
    additionalProperties: false,
    properties: {
      apiVersion: { const: apiVersion },
      kind: { const: kind },
      metadata,
      spec,
      status: { type: "object" },
    },
  };
}

const schemas = {
  "serving.kserve.io/v1alpha1 ServingRuntime":
    resource("serving.kserve.io/v1alpha1", "ServingRuntime", servingRuntimeSpec),
  "serving.kserve.io/v1alpha1 ClusterServingRuntime":
    resource("serving.kserve.io/v1alpha1", "ClusterServingRuntime", servingRuntimeSpec),
  "serving.kserve.io/v1beta1 InferenceService":
    resource("serving.kserve.io/v1beta1", "InferenceService", inferenceServiceSpec),
};

// Adds the k8s and k8sRest keywords to an Ajv instance, checking with
// `strict` (a k8s.js Strict).
function addKeywords(ajv, strict) {
  const withDefaults = (data, defaults) =>
    defaults ? Object.assign({}, defaults, data) : data;
  const report = (self, errors) => {
    self.errors = errors.map((e) => {
      const i = e.indexOf(": ");
      return { instancePath: e.slice(0, i), message: e.slice(i + 2), keyword: "k8s", params: {} };
    });
    return errors.length === 0;
  };
  ajv.addKeyword({ keyword: "k8sDefaults" });
  ajv.addKeyword({
    keyword: "k8s",
    schemaType: "string",
    errors: true,
    validate: function k8s(name, data, parent, cxt) {
      const at = cxt ? cxt.instancePath : "";
      return report(k8s, strict.validate(name, withDefaults(data, parent.k8sDefaults), at));
    },
  });
  ajv.addKeyword({
    keyword: "k8sRest",
    schemaType: "string",
    errors: true,
    validate: function k8sRest(name, data, parent, cxt) {
      if (data === null || typeof data !== "object" || Array.isArray(data)) return true;
      const own = parent.properties || {};
      const rest = {};
      for (const k of Object.keys(data)) if (!(k in own)) rest[k] = data[k];
      const at = cxt ? cxt.instancePath : "";
      return report(k8sRest, strict.validate(name, withDefaults(rest, parent.k8sDefaults), at));
    },
  });
}

module.exports = { schemas, addKeywords };
