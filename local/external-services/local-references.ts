import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { AppError, ensureError } from '../../shared/platform/errors/app-error';
import type { JsonValue } from '../../shared/platform/iac/iac-values';
import type { ResolveReferences } from '../../shared/platform/iac/plan';

/**
 * The local stand-in for the Secret Broker and the Config Platform: a JSON file of reference → value, read each time
 * a reference is resolved (so it can be edited while the host runs). Values go to the IaC engine's apply, which sends
 * them to the target only; this module never logs them and its errors name the reference, never a value.
 *
 * File shape (example, `<state dir>/references.json`):
 * ```json
 * { "secrets": { "broker://runtime-cloud/app-db-password": "s3cr3t" },
 *   "config": { "platform://app/feature-flags": "{\"newCheckout\":false}" } }
 * ```
 */
const fileSchema = z.object({
  secrets: z.record(z.string(), z.json()).default({}),
  config: z.record(z.string(), z.json()).default({}),
});

export const ReferenceErrors = {
  /** The reference is not in the file (or there is no file). */
  notFound: 'PROVISIONING.REFERENCE_UNRESOLVED',
  /** The file exists but is not the documented shape. */
  invalidStore: 'PROVISIONING.REFERENCE_STORE_INVALID',
} as const;

export function localReferenceResolver(file: string): ResolveReferences {
  return async (reference) => {
    const values = await readValues(file);
    const [kind, key, table] =
      'secretRef' in reference ? (['secret', reference.secretRef, values.secrets] as const) : (['configuration value', reference.configRef, values.config] as const);
    if (!Object.hasOwn(table, key)) {
      throw new AppError(ReferenceErrors.notFound, 'not-found', `the ${kind} ${key} is not known to the local reference store`, { reference: key });
    }
    return table[key] as JsonValue;
  };
}

async function readValues(file: string): Promise<z.infer<typeof fileSchema>> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (thrown) {
    if ((ensureError(thrown) as { code?: unknown }).code === 'ENOENT') return { secrets: {}, config: {} };
    throw thrown;
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text) as unknown;
  } catch {
    // The parser's message may quote the file's text, which holds secrets: say only where the problem is.
    throw new AppError(ReferenceErrors.invalidStore, 'internal', `the local reference store ${file} is not valid JSON`);
  }
  const result = fileSchema.safeParse(parsed);
  if (!result.success) throw new AppError(ReferenceErrors.invalidStore, 'internal', `the local reference store ${file} must be {"secrets": {...}, "config": {...}}`);
  return result.data;
}
