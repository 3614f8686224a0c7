import { InvocationContext, type InvocationContextInit } from '@azure/functions';
import { triggerOf, type BindingInfo, type Registration } from './registry';

/** Supplies the value of one extra input binding (`durableClient`, …) for an invocation. */
export type ExtraInputProvider = (binding: BindingInfo) => unknown;

/**
 * Builds InvocationContexts as the Functions worker does, for every trigger kind: `options` from the
 * registration's bindings, and the extra inputs that host components provide (the Durable runner provides
 * `durableClient`, which `df.getClient(context)` reads).
 */
export class InvocationContexts {
  readonly #providers = new Map<string, ExtraInputProvider>();

  provideExtraInput(type: string, provider: ExtraInputProvider): void {
    this.#providers.set(type.toLowerCase(), provider);
  }

  create(registration: Registration, init: Omit<InvocationContextInit, 'options' | 'functionName'>): InvocationContext {
    const bindings = Object.entries(registration.metadata.bindings).map(([name, binding]) => ({ ...binding, name }));
    const extraInputs = bindings.filter((b) => b.direction === 'in' && !/trigger$/i.test(b.type));
    const context = new InvocationContext({
      ...init,
      functionName: registration.metadata.name,
      options: {
        trigger: { ...triggerOf(registration) },
        extraInputs,
        extraOutputs: [],
      },
    });
    for (const input of extraInputs) {
      const provider = this.#providers.get(input.type.toLowerCase());
      if (provider) context.extraInputs.set(input.name, provider(input));
    }
    return context;
  }
}
