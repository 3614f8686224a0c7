/**
 * What the real Functions host receives through `@azure/functions-core`, kept for the local host to bind.
 * Shapes follow the host's RPC contract as `@azure/functions` 4.x produces them (`toCoreFunctionMetadata`).
 * The state lives on a global symbol shared with core-module.cjs.
 */
export interface BindingInfo {
  readonly type: string;
  readonly direction: 'in' | 'out';
  readonly name: string;
  readonly [option: string]: unknown;
}

export interface FunctionMetadata {
  readonly name: string;
  readonly bindings: Readonly<Record<string, BindingInfo>>;
  readonly retryOptions?: unknown;
}

export type FunctionCallback = (...args: never[]) => unknown;

export interface Registration {
  readonly metadata: FunctionMetadata;
  readonly callback: FunctionCallback;
}

interface CoreState {
  registrations: Registration[];
  hooks: Map<string, ((context: unknown) => unknown)[]>;
  programmingModel: unknown;
}

const STATE = Symbol.for('runtime-cloud.functions-core');

function state(): CoreState {
  const holder = globalThis as unknown as Record<symbol, CoreState | undefined>;
  return (holder[STATE] ??= { registrations: [], hooks: new Map(), programmingModel: undefined });
}

const triggers = new WeakMap<Registration, BindingInfo>();

/** The trigger binding of a function (exactly one per function). */
export function triggerOf(registration: Registration): BindingInfo {
  let trigger = triggers.get(registration);
  if (!trigger) {
    trigger = Object.values(registration.metadata.bindings).find((b) => /trigger$/i.test(b.type));
    if (!trigger) throw new Error(`function ${registration.metadata.name} has no trigger binding`);
    triggers.set(registration, trigger);
  }
  return trigger;
}

/** Every function registered so far, in registration order. */
export function registeredFunctions(): readonly Registration[] {
  return state().registrations;
}

/**
 * The functions by trigger type, as last listed: the Durable runner asks for them at every look for work, and
 * registrations are only ever appended, so a list stays good while the registrations' count does.
 */
const byTrigger = new Map<string, { readonly of: readonly Registration[]; readonly count: number; readonly list: readonly Registration[] }>();

/** Functions whose trigger binding has this type (`httpTrigger`, `timerTrigger`, `serviceBusTrigger`, …). */
export function functionsWithTrigger(type: string): readonly Registration[] {
  const all = registeredFunctions();
  const key = type.toLowerCase();
  const listed = byTrigger.get(key);
  if (listed?.of === all && listed.count === all.length) return listed.list;
  const list = all.filter((r) => triggerOf(r).type.toLowerCase() === key);
  byTrigger.set(key, { of: all, count: all.length, list });
  return list;
}

/** Functions registered through the hooks API (`preInvocation`, `appStart`, …). */
export function hooksNamed(name: string): readonly ((context: unknown) => unknown)[] {
  return state().hooks.get(name) ?? [];
}
