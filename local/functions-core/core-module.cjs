'use strict';
/**
 * The module `@azure/functions-core` as the local host provides it. The real Functions host injects a module of
 * this name into the Node worker; `@azure/functions` and `durable-functions` register every function through it.
 *
 * Plain CommonJS on purpose: it is loaded by Node's own `require` from inside `@azure/functions` (under tsx,
 * vitest or plain node alike), and it keeps its state on a global symbol so the TypeScript side (registry.ts),
 * which a test runner may load through its own module system, sees the same registrations.
 */
const STATE = Symbol.for('runtime-cloud.functions-core');
const state = (globalThis[STATE] ??= { registrations: [], hooks: new Map(), programmingModel: undefined });

exports.registerFunction = function registerFunction(metadata, callback) {
  state.registrations.push({ metadata, callback });
  return { dispose() {} };
};

exports.registerHook = function registerHook(name, callback) {
  const list = state.hooks.get(name) ?? [];
  list.push(callback);
  state.hooks.set(name, list);
  return {
    dispose() {
      state.hooks.set(name, (state.hooks.get(name) ?? []).filter((c) => c !== callback));
    },
  };
};

exports.setProgrammingModel = function setProgrammingModel(model) {
  state.programmingModel = model;
};

exports.getProgrammingModel = function getProgrammingModel() {
  return state.programmingModel;
};

/** The host's log channel; warnings and errors go to stderr, the rest is dropped as the host would filter it. */
exports.log = function log(level, category, message) {
  if (level === 'error' || level === 'critical' || level === 'warning') console.error(`[${category}] ${message}`);
};
