import { z } from 'zod';
import { fieldProblems, type FieldProblem } from '../platform/validation/validation';

/**
 * `PromotionApproved`, the message DeliveryHost puts on the queue `runtime-cloud-promotions`: a release approved
 * for an environment, with its desired state by reference (a Pulumi project in Git, at one commit). Pure model.
 *
 * Changing this shape is a breaking change for DeliveryHost: removing or renaming a field, adding a required one,
 * or narrowing a type, enum, pattern or length. `schemas/promotion-approved.schema.json` is its published form,
 * and a test fails when it and `promotionApprovedSchema` disagree. Unknown fields are ignored (not refused), so a
 * producer may add an optional field without breaking this reader.
 */
export const ENVIRONMENT_TIERS = ['development', 'staging', 'production'] as const;
export type EnvironmentTier = (typeof ENVIRONMENT_TIERS)[number];

/** A full commit sha: the desired state is read at exactly this commit, so a branch or short sha is refused. */
export const COMMIT_SHA_PATTERN = /^[0-9a-f]{40}$/;

/** A Pulumi stack name (letters, digits, `-`, `_`, `.`); it names the file `Pulumi.<stack>.yaml`. */
export const STACK_NAME_PATTERN = /^[A-Za-z0-9_.-]+$/;

export interface PromotionApproved {
  /** Opaque id given by DeliveryHost; the business key of the inbox (one run per promotion). */
  readonly promotionId: string;
  readonly tenantId: string;
  readonly environment: {
    readonly id: string;
    readonly name: string;
    readonly tier: EnvironmentTier;
  };
  readonly release: { readonly name: string; readonly version: string };
  readonly desiredState: {
    /** An HTTPS Git remote, a `file://` URL or a local path (local host). */
    readonly repository: string;
    readonly commit: string;
    /** The folder of the Pulumi project, relative to the repository root (`.` for the root). */
    readonly path: string;
    readonly stack: string;
  };
  readonly requestedBy: string;
  /** ISO-8601 date-time with seconds and a zone (`Z` or an offset). */
  readonly approvedAt: string;
}

const text = (maxLength: number) => z.string().min(1).max(maxLength);

/** The schema the code validates with; the JSON Schema file must say the same thing. */
export const promotionApprovedSchema = z.object({
  promotionId: text(200),
  tenantId: text(200),
  environment: z.object({
    id: text(200),
    name: text(200),
    tier: z.enum(ENVIRONMENT_TIERS),
  }),
  release: z.object({
    name: text(200),
    version: text(200),
  }),
  desiredState: z.object({
    repository: text(2048),
    commit: z.string().regex(COMMIT_SHA_PATTERN),
    path: text(1024),
    stack: text(200).regex(STACK_NAME_PATTERN),
  }),
  requestedBy: text(200),
  approvedAt: z.iso.datetime({ offset: true }),
}) satisfies z.ZodType<PromotionApproved>;

export type PromotionParse =
  | { readonly outcome: 'valid'; readonly promotion: PromotionApproved }
  | { readonly outcome: 'invalid'; readonly problems: readonly FieldProblem[] };

/**
 * Checks a message body without throwing: every problem is listed with its field path (`desiredState.commit`).
 * A body may arrive parsed, or as JSON text or bytes (senders choose the Service Bus body type), so text and bytes
 * are parsed first.
 */
export function parsePromotion(body: unknown): PromotionParse {
  let value = body;
  if (typeof value === 'string' || value instanceof Uint8Array) {
    const json = typeof value === 'string' ? value : new TextDecoder().decode(value);
    try {
      value = JSON.parse(json) as unknown;
    } catch {
      return { outcome: 'invalid', problems: [{ field: '(message)', message: 'the message body is not valid JSON' }] };
    }
  }
  const parsed = promotionApprovedSchema.safeParse(value);
  return parsed.success
    ? { outcome: 'valid', promotion: parsed.data }
    : { outcome: 'invalid', problems: fieldProblems(parsed.error, '(message)') };
}
