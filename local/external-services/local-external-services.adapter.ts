import { createHash } from 'node:crypto';
import { readFile, rename, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Kysely } from 'kysely';
import { z } from 'zod';
import { AppError, ensureError } from '../../shared/platform/errors/app-error';
import { canonicalJson, type JsonValue } from '../../shared/platform/iac/iac-values';
import { deepFreeze } from '../../shared/platform/values/deep-freeze';
import { localReferenceResolver } from './local-references';
import type { SqlStore } from '../../shared/platform/sql/database';
import { retryingContention } from '../../shared/platform/sql/transaction';
import type { Clock } from '../../shared/platform/time/clock';
import {
  ExternalErrors,
  serviceUnavailable,
  type ApplyEvidence,
  type ConfigPlatform,
  type ControlPlaneApi,
  type DeliveryHost,
  type ExternalServices,
  type GovernanceHost,
  type KnowledgeHost,
  type LastKnownConfig,
  type OutcomeReport,
  type PolicyAnswer,
  type PolicyDecision,
  type PolicyInput,
} from '../../shared/provisioning/external-services.client';
import { isUniqueViolation } from '../../shared/provisioning/provisioning.repository';

/**
 * The local host's stand-ins for the external services of provisioning: small, real and deterministic.
 *
 * - GovernanceHost: policies from `<state dir>/governance.json` (none: everything is allowed), secrets from the
 *   `secrets` of `<state dir>/references.json`, audit evidence in the SQL store (`local_governance_evidence`).
 *   A policy with `review: true` answers `pending`: the check waits in the SQL store (`local_governance_checks`)
 *   until `reviewCheck` records a reviewer's decision (the local endpoint POST .../external-services/governance/checks/{id}/review).
 * - ControlPlaneApi: environments, their approvers and editions from `<state dir>/control-plane.json` (none: every
 *   environment is known and any operator may approve).
 * - KnowledgeHost: receipts in the SQL store (`local_knowledge_artifacts`), content-addressed ids.
 * - Config Platform: the `config` of `<state dir>/references.json`; last known values in
 *   `<state dir>/config-last-known.json` (the client's cache, never the run's store).
 * - DeliveryHost: releases from `<state dir>/delivery.json` (none: it pins no release), promotion reports in the SQL
 *   store (`local_delivery_reports`, the first report of a tenant's run stands).
 *
 * Each can be switched unreachable (`local_external_services`, shared by every host on the store), as the local
 * cloud's targets can: its calls then fail as the real service's would when it does not answer.
 */
export const LOCAL_SERVICES = ['governance', 'control-plane', 'knowledge', 'config-platform', 'delivery'] as const;
export type LocalServiceName = (typeof LOCAL_SERVICES)[number];

interface LocalExternalTables {
  local_knowledge_artifacts: { id: string; run_id: string; kind: string; content: string; stored_at: number };
  local_governance_evidence: { id: string; run_id: string; evidence: string; recorded_at: number };
  local_external_services: { name: string; reachable: number };
  /** `report`: JSON of the `OutcomeReport` first received for the tenant's run. */
  local_delivery_reports: { tenant: string; run_id: string; id: string; report: string; received_at: number };
  /** `policies`, `review`: JSON arrays of policy ids; `decision`: JSON of a `Review`, null while pending. */
  local_governance_checks: {
    id: string;
    run_id: string;
    plan_digest: string;
    policies: string;
    review: string;
    requested_at: number;
    decision: string | null;
    decided_at: number | null;
  };
}

/** A reviewer's decision on a pending policy check of the local GovernanceHost. */
export type Review = { readonly decision: 'allow'; readonly by: string } | { readonly decision: 'deny'; readonly by: string; readonly reason: string };

export interface LocalExternalServices extends ExternalServices {
  /** The operator's switch: an unreachable service fails every call as the real one would when it does not answer. */
  setReachable(name: LocalServiceName, reachable: boolean): Promise<void>;
  /** Where the switch stands: the stand-in servers answer their health protocol from it, as an unreachable peer would. */
  isReachable(name: LocalServiceName): Promise<boolean>;
  /** The evidence the local GovernanceHost recorded for a run (bookkeeping: works while unreachable). */
  evidenceOf(runId: string): Promise<readonly ApplyEvidence[]>;
  /** An artifact the local KnowledgeHost stores (bookkeeping: works while unreachable). */
  artifact(id: string): Promise<{ readonly runId: string; readonly kind: string; readonly content: unknown } | undefined>;
  /**
   * A reviewer decides a pending policy check (the reviewer's side of the GovernanceHost: works while it is
   * unreachable). The first decision stands: deciding a decided check throws `PROVISIONING.POLICY_CHECK_DECIDED`
   * (conflict); an unknown check throws `PROVISIONING.POLICY_CHECK_UNKNOWN` (not-found).
   */
  reviewCheck(checkId: string, review: Review): Promise<void>;
  /** The promotion reports the local DeliveryHost took in for a tenant's run (bookkeeping: works while unreachable). */
  reportsOf(tenant: string, runId: string): Promise<readonly OutcomeReport[]>;
}

/**
 * `<state dir>/governance.json`. Example:
 * `{"policies": [{"id": "no-production-deletes", "tiers": ["production"], "denyOps": ["delete"], "reason": "production data is not deleted by a promotion"},
 *   {"id": "payments-review", "environments": ["env-payments"], "stacks": ["payments"], "review": true, "reason": "payments changes are reviewed"}]}`
 * A policy applies to the environments (id or name), tiers and stacks it lists (all when it lists none) and denies a
 * plan with a step whose op is in `denyOps` or whose resource type is in `denyTypes` (a `same` step never counts).
 * A policy with `review: true` that applies sends a plan no policy denies to review: `decide` answers `pending` with
 * a check (one per run and plan digest) that `reviewCheck` decides.
 */
const governanceFile = z.object({
  policies: z
    .array(
      z.object({
        id: z.string().min(1),
        environments: z.array(z.string()).optional(),
        tiers: z.array(z.string()).optional(),
        stacks: z.array(z.string()).optional(),
        review: z.boolean().optional(),
        denyOps: z.array(z.string()).optional(),
        denyTypes: z.array(z.string()).optional(),
        reason: z.string().min(1),
      }),
    )
    .default([]),
});

/**
 * `<state dir>/control-plane.json`. Example:
 * `{"environments": [{"id": "env-prod", "name": "production", "tier": "production", "approvers": ["alice"], "target": "prod-we"}], "editions": [{"id": "pro", "name": "Pro"}]}`
 * With `environments` listed, a promotion to another environment is refused; `tenant`, when given, limits an entry to one tenant.
 */
const controlPlaneFile = z.object({
  environments: z
    .array(
      z.object({
        id: z.string().min(1),
        tenant: z.string().optional(),
        name: z.string().optional(),
        tier: z.enum(['development', 'staging', 'production']).optional(),
        approvers: z.array(z.string()).optional(),
        target: z.string().min(1).optional(),
      }),
    )
    .optional(),
  editions: z.array(z.object({ id: z.string(), name: z.string() })).default([]),
});

/**
 * `<state dir>/delivery.json`, the releases the local DeliveryHost made. Example:
 * `{"releases": [{"tenant": "demo-team", "name": "demo-app", "version": "1.0.0", "repository": "file:///…/desired-state.git", "commit": "3f1c…", "path": "app"}]}`
 * With the file, a release it does not list is unknown (the promotion is refused); `tenant`, when given, limits an
 * entry to one tenant. Without it, every release is known and pins no desired state.
 */
const deliveryFile = z.object({
  releases: z.array(
    z.object({
      tenant: z.string().min(1).optional(),
      name: z.string().min(1),
      version: z.string().min(1),
      repository: z.string().min(1),
      commit: z.string().min(1),
      path: z.string().min(1),
    }),
  ),
});

const lastKnownFile = z.record(z.string(), z.object({ value: z.json(), at: z.string() }));

export function createLocalExternalServices(options: { readonly store: SqlStore; readonly clock: Clock; readonly stateDir: string }): LocalExternalServices {
  const { store, clock, stateDir } = options;
  const db = store.db as unknown as Kysely<LocalExternalTables>;
  const references = localReferenceResolver(join(stateDir, 'references.json'));
  const names: Record<LocalServiceName, { code: string; service: string }> = {
    governance: { code: ExternalErrors.governanceUnavailable, service: 'the GovernanceHost' },
    'control-plane': { code: ExternalErrors.controlPlaneUnavailable, service: 'the ControlPlaneApi' },
    knowledge: { code: ExternalErrors.knowledgeUnavailable, service: 'the KnowledgeHost' },
    'config-platform': { code: ExternalErrors.configUnavailable, service: 'the Config Platform' },
    delivery: { code: ExternalErrors.deliveryUnavailable, service: 'the DeliveryHost' },
  };

  async function isReachable(name: LocalServiceName): Promise<boolean> {
    const row = await retryingContention(() => db.selectFrom('local_external_services').select('reachable').where('name', '=', name).executeTakeFirst());
    return !row || Number(row.reachable) !== 0;
  }

  /** Runs `call` as the service would answer it: not at all while it is switched unreachable. */
  async function reachable<T>(name: LocalServiceName, call: () => Promise<T>): Promise<T> {
    if (!(await isReachable(name))) throw serviceUnavailable(names[name].code, names[name].service, new Error(`${name} is switched unreachable on this host`));
    return call();
  }

  /** The check of a run's plan that review policies apply to, taken in once; answers where it stands. */
  async function takeCheck(input: PolicyInput, policies: readonly string[], review: readonly string[]): Promise<PolicyAnswer> {
    const id = `chk-${sha(`${input.runId}\n${input.planDigest}`)}`;
    await retryingContention(async () => {
      const known = await db.selectFrom('local_governance_checks').select('id').where('id', '=', id).executeTakeFirst();
      if (!known) {
        await db
          .insertInto('local_governance_checks')
          .values({ id, run_id: input.runId, plan_digest: input.planDigest, policies: JSON.stringify(policies), review: JSON.stringify(review), requested_at: clock.now().getTime(), decision: null, decided_at: null })
          .execute();
      }
    });
    return checkAnswer(id);
  }

  async function checkRow(checkId: string) {
    const row = await retryingContention(() => db.selectFrom('local_governance_checks').selectAll().where('id', '=', checkId).executeTakeFirst());
    if (!row) throw new AppError(ExternalErrors.policyCheckUnknown, 'not-found', `the GovernanceHost has no policy check ${checkId}`, { checkId });
    return row;
  }

  async function checkAnswer(checkId: string): Promise<PolicyAnswer> {
    const row = await checkRow(checkId);
    if (row.decision === null) return { decision: 'pending', checkId };
    const review = JSON.parse(row.decision) as Review;
    if (review.decision === 'allow') return { decision: 'allow', policies: JSON.parse(row.policies) as string[] };
    const policy = (JSON.parse(row.review) as string[])[0] ?? 'review';
    return { decision: 'deny', policy, reason: `denied in review by ${review.by}: ${review.reason} (check ${checkId})` };
  }

  const governance: GovernanceHost = {
    decide: (input) =>
      reachable('governance', async () => {
        const decision = decide((await readJson(join(stateDir, 'governance.json'), governanceFile)) ?? { policies: [] }, input);
        return decision.decision === 'review' ? takeCheck(input, decision.policies, decision.review) : decision;
      }),
    policyCheck: (checkId) => reachable('governance', () => checkAnswer(checkId)),
    resolveSecret: (reference) => reachable('governance', () => references({ secretRef: reference })),
    recordEvidence: (evidence) =>
      reachable('governance', async () => {
        const id = `evd-${sha(`${evidence.runId}\n${evidence.planDigest}`)}`;
        await retryingContention(async () => {
          const known = await db.selectFrom('local_governance_evidence').select('id').where('id', '=', id).executeTakeFirst();
          if (!known) await db.insertInto('local_governance_evidence').values({ id, run_id: evidence.runId, evidence: JSON.stringify(evidence), recorded_at: clock.now().getTime() }).execute();
        });
        return id;
      }),
  };

  const controlPlane: ControlPlaneApi = {
    environment: (tenant, environmentId) =>
      reachable('control-plane', async () => {
        const file = await readJson(join(stateDir, 'control-plane.json'), controlPlaneFile);
        if (!file?.environments) return { id: environmentId };
        const entry = file.environments.find((e) => e.id === environmentId && (e.tenant === undefined || e.tenant === tenant));
        if (!entry) return undefined;
        return { id: entry.id, ...(entry.name ? { name: entry.name } : {}), ...(entry.tier ? { tier: entry.tier } : {}), ...(entry.approvers ? { approvers: entry.approvers } : {}), ...(entry.target ? { target: entry.target } : {}) };
      }),
    editions: () => reachable('control-plane', async () => (await readJson(join(stateDir, 'control-plane.json'), controlPlaneFile))?.editions ?? []),
  };

  const knowledge: KnowledgeHost = {
    putReceipt: (receipt) =>
      reachable('knowledge', async () => {
        const content = canonicalJson(receipt.content as JsonValue);
        const id = `art-${sha(`${receipt.kind}\n${receipt.runId}\n${content}`)}`;
        await retryingContention(async () => {
          const known = await db.selectFrom('local_knowledge_artifacts').select('id').where('id', '=', id).executeTakeFirst();
          if (!known) await db.insertInto('local_knowledge_artifacts').values({ id, run_id: receipt.runId, kind: receipt.kind, content, stored_at: clock.now().getTime() }).execute();
        });
        return id;
      }),
  };

  const configPlatform: ConfigPlatform = {
    resolve: (reference) => reachable('config-platform', () => references({ configRef: reference })),
  };

  const delivery: DeliveryHost = {
    resolveRelease: (tenant, release) =>
      reachable('delivery', async () => {
        const file = await readJson(join(stateDir, 'delivery.json'), deliveryFile);
        if (!file) return { name: release.name, version: release.version };
        const entry = file.releases.find((r) => r.name === release.name && r.version === release.version && (r.tenant === undefined || r.tenant === tenant));
        return entry ? { name: entry.name, version: entry.version, desiredState: { repository: entry.repository, commit: entry.commit, path: entry.path } } : undefined;
      }),
    reportOutcome: (report) =>
      reachable('delivery', async () => {
        const id = `rpt-${sha(`${report.tenant}\n${report.runId}`)}`;
        try {
          await retryingContention(() => db.insertInto('local_delivery_reports').values({ tenant: report.tenant, run_id: report.runId, id, report: JSON.stringify(report), received_at: clock.now().getTime() }).execute());
        } catch (thrown) {
          // The run was reported before (a retry after a lost answer, or two senders at once): the first report stands.
          if (!isUniqueViolation(thrown)) throw thrown;
        }
        return id;
      }),
  };

  const lastKnownPath = join(stateDir, 'config-last-known.json');
  const lastKnownConfig: LastKnownConfig = {
    async get(tenant, reference) {
      const entry = (await readJson(lastKnownPath, lastKnownFile))?.[lastKnownKey(tenant, reference)];
      return entry ? { value: entry.value as JsonValue, at: new Date(entry.at) } : undefined;
    },
    async put(tenant, reference, value, at) {
      const all = { ...(await readJson(lastKnownPath, lastKnownFile)) };
      all[lastKnownKey(tenant, reference)] = { value: value as z.infer<typeof lastKnownFile>[string]['value'], at: at.toISOString() };
      // Written whole and renamed into place, readable by this user only: the values are configuration, not secrets,
      // but they stay out of logs and other users' reach all the same.
      const temporary = `${lastKnownPath}.${process.pid}.tmp`;
      await writeFile(temporary, JSON.stringify(all), { mode: 0o600 });
      await rename(temporary, lastKnownPath);
    },
  };

  return {
    governance,
    controlPlane,
    knowledge,
    configPlatform,
    lastKnownConfig,
    delivery,
    async setReachable(name, value) {
      await retryingContention(async () => {
        await db.deleteFrom('local_external_services').where('name', '=', name).execute();
        await db.insertInto('local_external_services').values({ name, reachable: value ? 1 : 0 }).execute();
      });
    },
    isReachable,
    async evidenceOf(runId) {
      const rows = await retryingContention(() => db.selectFrom('local_governance_evidence').select('evidence').where('run_id', '=', runId).orderBy('recorded_at').execute());
      return rows.map((r) => JSON.parse(r.evidence) as ApplyEvidence);
    },
    async artifact(id) {
      const row = await retryingContention(() => db.selectFrom('local_knowledge_artifacts').selectAll().where('id', '=', id).executeTakeFirst());
      return row ? { runId: row.run_id, kind: row.kind, content: JSON.parse(row.content) as unknown } : undefined;
    },
    async reportsOf(tenant, runId) {
      const rows = await retryingContention(() => db.selectFrom('local_delivery_reports').select('report').where('tenant', '=', tenant).where('run_id', '=', runId).execute());
      return rows.map((r) => JSON.parse(r.report) as OutcomeReport);
    },
    async reviewCheck(checkId, review) {
      await checkRow(checkId);
      const decided = await retryingContention(() =>
        db.updateTable('local_governance_checks').set({ decision: JSON.stringify(review), decided_at: clock.now().getTime() }).where('id', '=', checkId).where('decision', 'is', null).executeTakeFirst(),
      );
      if (Number(decided.numUpdatedRows) !== 1) throw new AppError('PROVISIONING.POLICY_CHECK_DECIDED', 'conflict', `policy check ${checkId} is decided already`, { checkId });
    },
  };
}

/**
 * The first policy that denies the plan; else, when review policies apply, a review by them; else allow naming the
 * policies that applied. A rule that denies outright goes first: a plan it denies needs no reviewer. Pure.
 */
export function decide(
  file: z.infer<typeof governanceFile>,
  input: PolicyInput,
): PolicyDecision | { readonly decision: 'review'; readonly policies: readonly string[]; readonly review: readonly string[] } {
  const applied: string[] = [];
  const review: string[] = [];
  for (const policy of file.policies) {
    if (policy.environments && !policy.environments.includes(input.environment.id) && !policy.environments.includes(input.environment.name)) continue;
    if (policy.tiers && !policy.tiers.includes(input.environment.tier)) continue;
    if (policy.stacks && !policy.stacks.includes(input.stack)) continue;
    applied.push(policy.id);
    if (policy.review === true) review.push(policy.id);
    const offending = input.steps.find((s) => s.op !== 'same' && ((policy.denyOps ?? []).includes(s.op) || (policy.denyTypes ?? []).includes(s.type)));
    if (offending) return { decision: 'deny', policy: policy.id, reason: `${policy.reason} (policy ${policy.id}: ${offending.op} ${offending.urn})` };
  }
  return review.length > 0 ? { decision: 'review', policies: applied, review } : { decision: 'allow', policies: applied };
}

/** A tenant's reference in the last-known file: another tenant's reference of the same name is another entry. */
function lastKnownKey(tenant: string, reference: string): string {
  return `${tenant}\n${reference}`;
}

function sha(text: string): string {
  return createHash('sha256').update(text).digest('hex').slice(0, 32);
}

/** Files read by `readJson`, with the identity of the version read: runs read them at every step, edits are rare. */
const readFiles = new Map<string, { readonly version: string; readonly value: unknown }>();

/**
 * A JSON file of the state dir, parsed with `schema`; undefined when there is no file. Read again only when its
 * inode, size or modification time changed (an edit in place or a write renamed into place). The value is shared:
 * callers copy before changing it.
 */
async function readJson<T extends z.ZodType>(file: string, schema: T): Promise<z.infer<T> | undefined> {
  let text: string;
  let version: string;
  try {
    const stats = await stat(file, { bigint: true });
    version = `${stats.ino}:${stats.size}:${stats.mtimeNs}`;
    const known = readFiles.get(file);
    if (known?.version === version) return known.value as z.infer<T>;
    text = await readFile(file, 'utf8');
  } catch (thrown) {
    if ((ensureError(thrown) as { code?: unknown }).code === 'ENOENT') return undefined;
    throw thrown;
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text) as unknown;
  } catch {
    throw new AppError('PROVISIONING.LOCAL_SERVICE_FILE_INVALID', 'internal', `${file} is not valid JSON`);
  }
  const result = schema.safeParse(parsed);
  if (!result.success) throw new AppError('PROVISIONING.LOCAL_SERVICE_FILE_INVALID', 'internal', `${file} is not the documented shape`);
  readFiles.set(file, { version, value: deepFreeze(result.data) });
  return result.data;
}
