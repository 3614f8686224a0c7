import { createHash } from 'node:crypto';
import type { Transaction } from 'kysely';
import type { NewEvent } from '../platform/bus/events';
import { markInboundProcessed, recordInbound } from '../platform/bus/inbox.repository';
import { TENANT_NOT_ADDRESSABLE, tenantSegmentProblem } from '../platform/config/targets';
import { describeRepository } from '../platform/git/repository-url';
import { qualifiedStackName, sameStack } from '../platform/iac/stack-ref';
import { inTransaction, retryingContention } from '../platform/sql/transaction';
import { AppError, ensureError } from '../platform/errors/app-error';
import { describeFieldProblems, type FieldProblem } from '../platform/validation/validation';
import { ExternalErrors, type DesiredStateRef, type Release } from './external-services.client';
import { parsePromotion, type PromotionApproved } from './promotion';
import { appendEvents, failFast, nowOf, permanentFailure, repositoryOf, type Failure, type ProvisioningContext } from './provisioning.context';
import { bindEnvironmentStack, findEnvironmentStack, findRunByPromotion, insertRun, type NewRun } from './runs.repository';
import { inboxOf, insertRejection, type Rejection } from './rejections.repository';
import type { ProvisioningTables } from './provisioning.tables';
import { promotionRejected, provisioningFailed } from './run-events';
import { RunErrors, stackOf, type Run } from './run';
import { readProject } from './source.service';
import { supersedeQueued } from './stack-queue.service';
import { isUniqueViolation } from '../platform/sql/dialect';
import { retry } from '../platform/time/retry';

/** The inbox module name of provisioning messages. */
export const PROVISIONING_MODULE = 'provisioning';

export type IntakeResult =
  /** A new run, queued: start its orchestration. */
  | { readonly outcome: 'accepted'; readonly run: Run }
  /** The promotion has a run already (a redelivery or a resend): start its orchestration if it is not running. */
  | { readonly outcome: 'duplicate'; readonly run: Run }
  /** Not a valid promotion: recorded (a rejected run, or a rejection row when no run can be made) with its reason. */
  | { readonly outcome: 'rejected'; readonly run?: Run; readonly code: string; readonly reason: string }
  /** The messageId was used before for another message: nothing was done. */
  | { readonly outcome: 'ignored'; readonly reason: string };

/** A message of the promotions queue. */
export interface IntakeMessage {
  readonly messageId: string;
  readonly body: unknown;
  /** Whether the queue dead-letters the message if this delivery fails too (its delivery count reached the maximum). */
  readonly lastDelivery?: boolean;
}

/** Thrown inside an intake transaction to roll it back when its messageId was already used for another message. */
export class MessageIdReused extends Error {}

/**
 * Takes a message from the promotions queue: one run per promotion, or a recorded rejection. The promotion is
 * checked first (tenant, environment, desired state), outside any transaction; then the run, the runs it
 * supersedes, the inbox entry and the events are recorded in one.
 */
export async function intake(ctx: ProvisioningContext, message: IntakeMessage): Promise<IntakeResult> {
  const parsed = parsePromotion(message.body);
  if (parsed.outcome === 'invalid') return rejectMessage(ctx, message.messageId, message.body, parsed.problems);
  const promotion = parsed.promotion;
  const known = await retryingContention(() => findRunByPromotion(ctx.db, promotion.tenantId, promotion.promotionId));
  if (known) return duplicate(ctx, known, message.messageId);
  // Outside the transaction: it reads Git. A transient failure here throws, and the message is delivered again.
  const checked = await checkPromotion(ctx, promotion).catch((thrown: unknown) => {
    // On its last delivery the message would be dead-lettered with nothing recorded and nobody told: the promotion
    // is rejected with the failure's code instead (a ControlPlaneApi or Git remote that did not answer), and its
    // ProvisioningFailed tells the sender to promote again.
    if (!message.lastDelivery) throw thrown;
    const error = ensureError(thrown);
    const code = error instanceof AppError ? error.code : RunErrors.internal;
    return { repository: describeRepository(promotion.desiredState.repository), refusal: { code, message: `on the message's last delivery: ${error.message}` } } satisfies CheckedPromotion;
  });
  // Another host bound the environment to its stack at the same moment: once more, which reads that binding.
  return retry(
    () =>
      inTransaction(ctx.db, (trx) => recordRun(ctx, trx, promotion, message.messageId, checked)).catch(async (thrown: unknown): Promise<IntakeResult> => {
        if (thrown instanceof MessageIdReused) {
          return { outcome: 'ignored', reason: `messageId ${message.messageId} was used before for another message` };
        }
        if (!isUniqueViolation(thrown)) throw thrown;
        // Another host took the same promotion in at the same moment: its run is the one.
        const winner = await retryingContention(() => findRunByPromotion(ctx.db, promotion.tenantId, promotion.promotionId));
        if (winner) return duplicate(ctx, winner, message.messageId);
        throw thrown;
      }),
    { attempts: 2, backoff: { kind: 'fixed', firstMs: 0 }, retryIf: isUniqueViolation },
  );
}

/**
 * One transaction, in the lock order (run rows, then the inbox and the outbox): the run, the environment's stack
 * (bound by its first run; another stack is refused), the runs it supersedes, the inbox entry and the events.
 */
async function recordRun(ctx: ProvisioningContext, trx: Transaction<ProvisioningTables>, promotion: PromotionApproved, messageId: string, checked: CheckedPromotion): Promise<IntakeResult> {
  const at = nowOf(ctx);
  const id = ctx.ids.next('run');
  const fields = { ...promotionRun(promotion, checked.repository), project: 'project' in checked ? checked.project : '' };
  const refusal = 'refusal' in checked ? checked.refusal : await bindEnvironment(trx, fields, checked.target, id, at);
  const run = await insertRun(trx, { ...fields, id, state: refusal ? 'rejected' : 'queued', ...(refusal ? { error: refusal } : {}), now: at });
  const events: NewEvent[] = [];
  if (refusal) {
    events.push(provisioningFailed(run, repositoryOf(run), { code: refusal.code, reason: refusal.message, finishedAt: new Date(at) }));
  } else {
    // A newer promotion of the same environment replaces what is still queued for it: applying the older one first
    // would only be undone.
    events.push(...(await supersedeQueued(trx, run, `promotion ${promotion.promotionId}`, at)));
  }
  await recordRunInbound(ctx, trx, { messageId, run, outcome: refusal ? 'rejected' : 'queued' });
  await appendEvents(ctx, trx, events);
  return refusal ? { outcome: 'rejected', run, code: refusal.code, reason: refusal.message } : { outcome: 'accepted', run };
}

async function duplicate(ctx: ProvisioningContext, run: Run, messageId: string): Promise<IntakeResult> {
  await recordResend(ctx, run, messageId);
  return { outcome: 'duplicate', run };
}

/** A message for a run that exists: recorded so the resend is visible in the inbox (a redelivery records nothing new). */
export async function recordResend(ctx: ProvisioningContext, run: Run, messageId: string): Promise<void> {
  await retryingContention(() => recordInbound(inboxOf(ctx.db), { module: PROVISIONING_MODULE, messageId, businessKey: runBusinessKey(run) }, ctx.clock));
}

/**
 * A run's business key in the inbox: its key is unique per tenant only, so the inbox keys it with its tenant (as a
 * digest: a tenant id and a key may each be 200 characters, the inbox's column too).
 */
function runBusinessKey(run: Pick<Run, 'tenant' | 'promotionId'>): string {
  return `run:${createHash('sha256').update(JSON.stringify([run.tenant, run.promotionId])).digest('hex')}`;
}

/**
 * The environment's stack and target: bound by its first run that is not refused, and from then on the only ones
 * its promotions may name (moving an environment would leave its resources behind on the old target). Answers the
 * refusal of a promotion naming another, or undefined. A first promotion of the environment on another host at the
 * same moment fails this transaction on the binding's key; the retry reads it.
 */
async function bindEnvironment(trx: Transaction<ProvisioningTables>, run: Pick<NewRun, 'tenant' | 'environment' | 'project' | 'stack'>, target: string, runId: string, at: number): Promise<Failure | undefined> {
  const stack = stackOf(run);
  const bound = await findEnvironmentStack(trx, run.tenant, run.environment.id);
  if (!bound) {
    await bindEnvironmentStack(trx, { tenant: run.tenant, environmentId: run.environment.id, stack, target, runId, at });
    return undefined;
  }
  if (!sameStack(bound, stack)) {
    return {
      code: RunErrors.stackMismatch,
      message: `environment ${run.environment.id} is bound to stack ${qualifiedStackName(bound)}; a promotion naming ${qualifiedStackName(stack)} is refused`,
    };
  }
  // A binding made before targets were bound keeps the target its rules give.
  if (bound.target !== undefined && bound.target !== target) {
    return { code: RunErrors.targetMismatch, message: `environment ${run.environment.id} lives on target ${bound.target}; a promotion putting it on ${target} is refused` };
  }
  return undefined;
}

/**
 * A promotion that can become a run, with its project's name; or why it cannot. `repository` is what its run
 * records: as the source policy normalized it, or, for a refused one, as it may be shown (never with credentials).
 */
type CheckedPromotion = { readonly repository: string } & ({ readonly project: string; readonly target: string } | { readonly refusal: Failure });

/**
 * Whether a well-formed promotion can become a run: an unknown tenant, release or environment, desired state that is
 * not its release's, or desired state that is not there (repository, commit, path) or not allowed, is a refusal.
 * Transient failures (Git remote unreachable, the DeliveryHost or ControlPlaneApi not answering) are thrown.
 */
async function checkPromotion(ctx: ProvisioningContext, promotion: PromotionApproved): Promise<CheckedPromotion> {
  const refused = (refusal: Failure): CheckedPromotion => ({ repository: describeRepository(promotion.desiredState.repository), refusal });
  if (!(await ctx.knowsTenant(promotion.tenantId))) {
    return refused({ code: RunErrors.unknownTenant, message: `the tenant ${promotion.tenantId} is not known to this host` });
  }
  // What the release is, the DeliveryHost says: a message never decides it. Fail-fast, as the ControlPlaneApi below.
  const release = await failFast(ExternalErrors.deliveryUnavailable, 'the DeliveryHost', () => ctx.services.delivery.resolveRelease(promotion.tenantId, promotion.release));
  const releaseRefusal = releaseProblem(promotion, release, ctx.unpinnedReleases);
  if (releaseRefusal) return refused(releaseRefusal);
  // Fail-fast: a ControlPlaneApi that does not answer throws, and the message is delivered again.
  const environment = await failFast(ExternalErrors.controlPlaneUnavailable, 'the ControlPlaneApi', () => ctx.services.controlPlane.environment(promotion.tenantId, promotion.environment.id));
  if (!environment) {
    return refused({ code: ExternalErrors.unknownEnvironment, message: `the control plane does not know environment ${promotion.environment.id} of tenant ${promotion.tenantId}` });
  }
  // The tier decides approval and four eyes: the control plane's, and a message naming another is refused.
  if (environment.tier !== undefined && environment.tier !== promotion.environment.tier) {
    return refused({
      code: RunErrors.tierMismatch,
      message: `the promotion names tier ${promotion.environment.tier} for environment ${promotion.environment.id}, which the control plane has as ${environment.tier}`,
    });
  }
  const target = environment.target ?? ctx.targets.byRules({ tenant: promotion.tenantId, environment: promotion.environment.id, tier: promotion.environment.tier });
  if (!ctx.targets.ids.includes(target)) {
    return refused({ code: RunErrors.unknownTarget, message: `the control plane puts environment ${promotion.environment.id} on target ${target}, which this installation does not have` });
  }
  // The tenant's id becomes part of its state location and key on the target, and of its own agent pool's id unless
  // the installation put it in a group: checked before anything is read.
  const runner = ctx.runners?.targets.find((t) => t.target === target);
  const named = runner !== undefined && (runner.backend !== undefined || !runner.groups.some((g) => g.tenants.includes(promotion.tenantId)));
  const tenantProblem = named ? tenantSegmentProblem(promotion.tenantId) : undefined;
  if (tenantProblem) return refused({ code: TENANT_NOT_ADDRESSABLE, message: tenantProblem });
  try {
    const { repository, project } = await readProject(ctx, promotion.tenantId, promotion.desiredState);
    return { repository, project, target };
  } catch (thrown) {
    return refused(permanentFailure(thrown));
  }
}

/**
 * Why a promotion does not promote its release: the DeliveryHost made none of that name and version, cut it from
 * other desired state, or did not say which desired state it is (unless this host allows that: the local stand-in).
 */
function releaseProblem(promotion: PromotionApproved, release: Release | undefined, unpinned: 'refuse' | 'allow'): Failure | undefined {
  const named = `release ${promotion.release.name} ${promotion.release.version} of tenant ${promotion.tenantId}`;
  if (!release) return { code: ExternalErrors.releaseUnknown, message: `the DeliveryHost has no ${named}` };
  const pinned = release.desiredState;
  if (!pinned) return unpinned === 'allow' ? undefined : { code: ExternalErrors.releaseNotPinned, message: `the DeliveryHost answered the ${named} without its desired state, so nothing says the promotion's is the release's` };
  const differing = (['repository', 'commit', 'path'] as const satisfies readonly (keyof DesiredStateRef)[]).filter((field) => pinned[field] !== promotion.desiredState[field]);
  if (differing.length === 0) return undefined;
  return {
    code: ExternalErrors.releaseMismatch,
    message: `the promotion's desired state is not the ${named}: ${differing.map((field) => `${field} ${describeField(field, promotion.desiredState[field])} where the release has ${describeField(field, pinned[field])}`).join('; ')}`,
  };
}

/** A desired state field as a refusal may show it: a repository without credentials. */
function describeField(field: keyof DesiredStateRef, value: string): string {
  return field === 'repository' ? describeRepository(value) : value;
}

async function rejectMessage(ctx: ProvisioningContext, messageId: string, body: unknown, problems: readonly FieldProblem[]): Promise<IntakeResult> {
  const code = RunErrors.invalidPromotion;
  const reason = `the message is not a valid PromotionApproved: ${describeFieldProblems(problems)}`;
  const readable = readableIds(body);
  await inTransaction(ctx.db, async (trx) => {
    const at = ctx.clock.now();
    const rejection: Rejection = { messageId, ...readable, code, reason, problems, receivedAt: at };
    // A redelivery of this message: recorded and announced already.
    if (!(await insertRejection(trx, rejection))) return;
    await recordRejectedInbound(ctx, trx, messageId);
    await appendEvents(ctx, trx, [promotionRejected({ messageId, ...readable, code, reason, problems, at })]);
  });
  return { outcome: 'rejected', code, reason };
}

/**
 * The inbox entry of a message that made a run, keyed by its business key; throws `MessageIdReused` (rolling the
 * transaction back) when the messageId was used before for another message.
 */
export async function recordRunInbound(
  ctx: ProvisioningContext,
  trx: Transaction<ProvisioningTables>,
  entry: { readonly messageId: string; readonly run: Pick<Run, 'tenant' | 'promotionId'>; readonly outcome: 'queued' | 'rejected' },
): Promise<void> {
  const inbox = inboxOf(trx);
  const inbound = await recordInbound(inbox, { module: PROVISIONING_MODULE, messageId: entry.messageId, businessKey: runBusinessKey(entry.run) }, ctx.clock);
  if (!inbound.isNew) throw new MessageIdReused();
  await markInboundProcessed(inbox, { module: PROVISIONING_MODULE, messageId: entry.messageId, outcome: entry.outcome }, ctx.clock);
}

/** The inbox entry of a message no run was made for, keyed by the message: a malformed one must not shadow a valid one. */
export async function recordRejectedInbound(ctx: ProvisioningContext, trx: Transaction<ProvisioningTables>, messageId: string): Promise<void> {
  const inbox = inboxOf(trx);
  await recordInbound(inbox, { module: PROVISIONING_MODULE, messageId, businessKey: `invalid:${messageId}` }, ctx.clock);
  await markInboundProcessed(inbox, { module: PROVISIONING_MODULE, messageId, outcome: 'rejected' }, ctx.clock);
}

/** The run a promotion makes: its fields as the message gives them, but the repository as checked. */
function promotionRun(p: PromotionApproved, repository: string): Omit<NewRun, 'id' | 'project' | 'state' | 'error' | 'now'> {
  return {
    key: p.promotionId,
    tenant: p.tenantId,
    environment: p.environment,
    release: p.release,
    stack: p.desiredState.stack,
    desiredState: { repository, commit: p.desiredState.commit, path: p.desiredState.path },
    requestedBy: p.requestedBy,
    reason: 'promotion',
  };
}

/** The ids a malformed message may still carry, for its rejection record and event. */
function readableIds(body: unknown): { promotionId?: string; tenantId?: string } {
  let value = body;
  if (typeof value === 'string') {
    try {
      value = JSON.parse(value) as unknown;
    } catch {
      return {};
    }
  }
  if (typeof value !== 'object' || value === null) return {};
  const { promotionId, tenantId } = value as { promotionId?: unknown; tenantId?: unknown };
  const usable = (v: unknown) => typeof v === 'string' && v.length > 0 && v.length <= 200;
  return { ...(usable(promotionId) ? { promotionId: promotionId as string } : {}), ...(usable(tenantId) ? { tenantId: tenantId as string } : {}) };
}
