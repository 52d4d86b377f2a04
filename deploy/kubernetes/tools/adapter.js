// Schema of prometheus-adapter's configuration (its --config file, the
// config.yaml of its ConfigMap), written from the Go types it is read into
// (pkg/config/config.go of kubernetes-sigs/prometheus-adapter:
// MetricsDiscoveryConfig, DiscoveryRule, ResourceMapping, NameMapping...).
// The adapter reads it with yaml.UnmarshalStrict: an unknown field is an
// error there, and here.
"use strict";

const str = { type: "string" };

const groupResource = {
  type: "object",
  required: ["resource"],
  additionalProperties: false,
  properties: { group: str, resource: { type: "string", minLength: 1 } },
};

const resourceMapping = {
  type: "object",
  additionalProperties: false,
  properties: {
    template: str,
    overrides: { type: "object", additionalProperties: groupResource },
  },
};

const regexFilter = {
  type: "object",
  additionalProperties: false,
  minProperties: 1,
  maxProperties: 1, // "Only one field may be set at a time."
  properties: { is: { type: "string", format: "regex" }, isNot: { type: "string", format: "regex" } },
};

const discoveryRule = {
  type: "object",
  required: ["seriesQuery"],
  additionalProperties: false,
  properties: {
    seriesQuery: { type: "string", minLength: 1 },
    seriesFilters: { type: "array", items: regexFilter },
    resources: resourceMapping,
    name: {
      type: "object",
      additionalProperties: false,
      properties: { matches: { type: "string", format: "regex" }, as: str },
    },
    metricsQuery: str,
    labelValueReplacements: {
      type: "array",
      items: {
        type: "object",
        additionalProperties: false,
        properties: { find: str, replace: str },
      },
    },
  },
};

const resourceRule = {
  type: "object",
  additionalProperties: false,
  properties: {
    containerQuery: str,
    nodeQuery: str,
    resources: resourceMapping,
    containerLabel: str,
  },
};

const config = {
  type: "object",
  additionalProperties: false,
  properties: {
    rules: { type: "array", items: discoveryRule },
    externalRules: { type: "array", items: discoveryRule },
    resourceRules: {
      type: "object",
      additionalProperties: false,
      properties: {
        cpu: resourceRule,
        memory: resourceRule,
        window: { type: "string", pattern: "^([0-9]+(ms|s|m|h|d|w|y))+$" },
      },
    },
  },
};

module.exports = { config };
