import type { TenantFilter } from '../platform/auth/auth';
import { retryingContention } from '../platform/sql/transaction';
import type { DriftReport } from './drift';
import { AppError } from '../platform/errors/app-error';
import { groupByResource, type EnvironmentKey } from './environment';
import { cursorKey, environmentByKey, environmentView, existingEnvironment, keyOf, nowOf, pageOf, type InventoryContext, type DriftView, type EnvironmentView, type Page, type PageRequest } from './inventory.context';
import { listEnvironments as listEnvironmentRows, openProposal, updateEnvironment } from './inventory.repository';
import type { StoredResource } from './observed-inventory.repository';

/** What operators see of environments (their desired release, drift status, scanning, observed resources) and pausing scans. */

const SCANS_SHOWN = 20;

export async function setScanning(ctx: InventoryContext, tenants: TenantFilter, environmentId: string, request: { enabled: boolean; by: string; reason: string }): Promise<EnvironmentView> {
  const key = keyOf(await existingEnvironment(ctx, tenants, environmentId));
  const at = nowOf(ctx);
  await retryingContention(() =>
    updateEnvironment(
      ctx.db,
      key,
      request.enabled
        ? { scan_disabled_by: null, scan_disabled_reason: null, scan_disabled_at: null, next_scan_at: at }
        : { scan_disabled_by: request.by, scan_disabled_reason: request.reason, scan_disabled_at: at },
    ),
  );
  return environmentView(ctx, await environmentByKey(ctx, key));
}

export async function listEnvironments(ctx: InventoryContext, tenants: TenantFilter, page: PageRequest): Promise<Page<EnvironmentView>> {
  const after = environmentCursor(page.cursor);
  const rows = await retryingContention(() => listEnvironmentRows(ctx.db, ctx.dialect, tenants, { ...(after !== undefined ? { after } : {}), limit: page.limit + 1 }));
  return pageOf(rows, page.limit, (r) => JSON.stringify([r.tenant_id, r.environment_id]), (r) => environmentView(ctx, r));
}

export async function getEnvironment(ctx: InventoryContext, tenants: TenantFilter, environmentId: string): Promise<EnvironmentView> {
  return environmentView(ctx, await existingEnvironment(ctx, tenants, environmentId));
}

export async function inventory(ctx: InventoryContext, tenants: TenantFilter, environmentId: string, page: PageRequest): Promise<{ environment: EnvironmentView; items: StoredResource[]; nextCursor?: string }> {
  const after = cursorKey(page.cursor);
  const row = await existingEnvironment(ctx, tenants, environmentId);
  // Paged in Table storage, in its key order: a page reads about `limit` rows, never the whole partition (an
  // environment may hold 100,000 resources).
  const rows = await ctx.tables.listPage(keyOf(row), { ...(after !== undefined ? { after } : {}), limit: page.limit + 1 });
  return { environment: environmentView(ctx, row), ...pageOf(rows, page.limit, (r) => r.key, (r) => r.resource) };
}

export async function drift(ctx: InventoryContext, tenants: TenantFilter, environmentId: string): Promise<DriftView> {
  const row = await existingEnvironment(ctx, tenants, environmentId);
  const report = row.report !== null ? (JSON.parse(row.report) as DriftReport) : undefined;
  const open = await retryingContention(() => openProposal(ctx.db, keyOf(row)));
  return {
    environment: environmentView(ctx, row),
    findings: report ? groupByResource(report.findings) : [],
    ignored: report?.ignored ?? [],
    expiredRules: report?.expiredRules ?? [],
    ...(report ? { fingerprint: report.fingerprint } : {}),
    ...(open ? { openProposalId: open.id } : {}),
    scans: await ctx.tables.scans(keyOf(row), SCANS_SHOWN),
  };
}

/** The (tenant, id) a page of environments goes on after: environment ids are unique per tenant only. */
function environmentCursor(cursor: string | undefined): EnvironmentKey | undefined {
  const key = cursorKey(cursor);
  if (key === undefined) return undefined;
  try {
    const [tenant, id] = JSON.parse(key) as unknown[];
    if (typeof tenant === 'string' && typeof id === 'string') return { tenant, id };
  } catch {
    // Not one of ours: refused below.
  }
  throw new AppError('REQUEST.INVALID_CURSOR', 'validation', 'the cursor is not one this API returned');
}
