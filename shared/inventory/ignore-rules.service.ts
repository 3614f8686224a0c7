import { createHash } from 'node:crypto';
import type { TenantFilter } from '../platform/auth/auth';
import { isUniqueViolation } from '../platform/sql/dialect';
import { AppError } from '../platform/errors/app-error';
import { retryingContention } from '../platform/sql/transaction';
import { canonicalJson, ignoreRuleProblems, type IgnoreRule } from './drift';
import { cursorKey, existingEnvironment, keyOf, nowOf, pageOf, ruleById, type InventoryContext, type Page, type PageRequest } from './inventory.context';
import { deleteIgnoreRule as deleteIgnoreRuleRow, findIgnoreRuleByKey, insertIgnoreRule, listIgnoreRules as listIgnoreRuleRows, type RecordedIgnoreRule } from './inventory.repository';

/** An environment's ignore rules: drift an operator accepts for a while, listed as ignored instead of as a finding. */

export async function listIgnoreRules(ctx: InventoryContext, tenants: TenantFilter, environmentId: string, query: PageRequest & { includeDeleted: boolean }): Promise<Page<RecordedIgnoreRule>> {
  const after = cursorKey(query.cursor);
  const key = keyOf(await existingEnvironment(ctx, tenants, environmentId));
  const rows = await retryingContention(() =>
    listIgnoreRuleRows(ctx.db, ctx.dialect, key, { includeDeleted: query.includeDeleted, page: { ...(after !== undefined ? { after } : {}), limit: query.limit + 1 } }),
  );
  return pageOf(rows, query.limit, (r) => r.id, (r) => r);
}

export async function addIgnoreRule(
  ctx: InventoryContext,
  tenants: TenantFilter,
  environmentId: string,
  rule: Omit<IgnoreRule, 'id'>,
  made: { by: string; idempotencyKey?: string },
): Promise<{ rule: RecordedIgnoreRule; created: boolean }> {
  const key = keyOf(await existingEnvironment(ctx, tenants, environmentId));
  const recorded: IgnoreRule = { ...rule, id: ctx.ids.next('ign') };
  const problems = ignoreRuleProblems(recorded);
  if (problems.length > 0) throw new AppError('INVENTORY.INVALID_IGNORE_RULE', 'validation', `the ignore rule is not valid: ${problems.join('; ')}`, { problems });
  const requestDigest = createHash('sha256').update(canonicalJson(rule)).digest('hex');
  const earlier = async () => {
    const found = made.idempotencyKey === undefined ? undefined : await retryingContention(() => findIgnoreRuleByKey(ctx.db, key, made.idempotencyKey!));
    if (found && found.requestDigest !== requestDigest) throw new AppError('REQUEST.IDEMPOTENCY_KEY_REUSED', 'unprocessable', 'this Idempotency-Key was used for a different ignore rule');
    return found && { rule: await ruleById(ctx, key, found.id), created: false };
  };
  const before = await earlier();
  if (before) return before;
  if (Date.parse(rule.expiresAt) <= nowOf(ctx)) throw new AppError('INVENTORY.INVALID_IGNORE_RULE', 'validation', 'expiresAt must be in the future', { expiresAt: rule.expiresAt });
  try {
    await retryingContention(() =>
      insertIgnoreRule(ctx.db, key, recorded, { by: made.by, at: nowOf(ctx), requestDigest, ...(made.idempotencyKey !== undefined ? { idempotencyKey: made.idempotencyKey } : {}) }),
    );
  } catch (thrown) {
    // The same key sent twice at once: the other request recorded the rule.
    const raced = isUniqueViolation(thrown) ? await earlier() : undefined;
    if (raced) return raced;
    throw thrown;
  }
  return { rule: await ruleById(ctx, key, recorded.id), created: true };
}

export async function deleteIgnoreRule(ctx: InventoryContext, tenants: TenantFilter, environmentId: string, ruleId: string, by: string): Promise<void> {
  const key = keyOf(await existingEnvironment(ctx, tenants, environmentId));
  if (!(await retryingContention(() => deleteIgnoreRuleRow(ctx.db, key, ruleId, by, nowOf(ctx))))) {
    throw new AppError('INVENTORY.IGNORE_RULE_NOT_FOUND', 'not-found', `environment ${environmentId} has no ignore rule ${ruleId} in force`, { environmentId, ruleId });
  }
}
