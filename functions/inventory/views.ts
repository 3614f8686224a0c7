import type { z as Zod } from 'zod';
import { lazySchema, type Z } from '../../shared/platform/validation/lazy-schema';

/**
 * The schemas of inventory's views for the OpenAPI document (`endpoint({ response })`), written from the serialized
 * shapes of shared/inventory (inventory.context.ts `EnvironmentView`, `ProposalView`, `DriftView`; drift.ts the
 * findings; observed-inventory.repository.ts `ScanRecord`; inventory.repository.ts `RecordedIgnoreRule`).
 * tests/integration/openapi-responses.test.ts checks real answers against them. Built on first use: registering the
 * functions loads no zod.
 */
const shapes = (z: Z) => {
  const iso = z.string().describe('ISO-8601 UTC');
  const environment = z.object({
    id: z.string(),
    name: z.string(),
    tier: z.string(),
    tenantId: z.string(),
    project: z.string(),
    stack: z.string(),
    qualifiedStack: z.string(),
    desiredRelease: z.object({ name: z.string(), version: z.string(), runId: z.string(), appliedAt: iso }),
    lastRun: z.object({ id: z.string(), state: z.string(), at: iso }).optional(),
    drift: z.object({
      status: z.enum(['in-sync', 'drifted', 'unknown']),
      stale: z.boolean(),
      reason: z.string().optional(),
      lastObservedAt: iso.optional(),
      staleSince: iso.optional(),
      lastScanAt: iso.optional(),
    }),
    scanning: z.object({
      intervalSeconds: z.number(),
      nextScanAt: iso,
      lastOutcome: z.string().optional(),
      lastReason: z.string().optional(),
      paused: z.object({ by: z.string(), reason: z.string(), at: iso }).optional(),
    }),
  });
  const path = z.array(z.union([z.string(), z.number()]));
  const findingFields = { urn: z.string(), type: z.string() };
  const findings = [
    z.object({ kind: z.literal('missing'), severity: z.literal('high'), ...findingFields }),
    z.object({ kind: z.literal('replaced'), severity: z.literal('high'), ...findingFields, observedType: z.string() }),
    z.object({ kind: z.literal('modified'), severity: z.literal('medium'), ...findingFields, path, desired: z.unknown().optional(), observed: z.unknown().optional() }),
    z.object({ kind: z.literal('unmanaged'), severity: z.literal('low'), ...findingFields }),
  ] as const;
  const finding = z.discriminatedUnion('kind', findings);
  const ignoredFinding = z.discriminatedUnion(
    'kind',
    findings.map((f) => f.extend({ ignoredBy: z.array(z.string()), holdsOnApply: z.boolean() })) as unknown as typeof findings,
  );
  const resourceFindings = z.object({ urn: z.string(), type: z.string(), severity: z.enum(['high', 'medium', 'low']), findings: z.array(finding) });
  const scan = z.object({
    scanId: z.string(),
    tenantId: z.string(),
    environmentId: z.string(),
    trigger: z.string(),
    outcome: z.enum(['completed', 'failed', 'skipped']),
    reason: z.string().optional(),
    startedAt: iso,
    finishedAt: iso,
    resources: z.number().optional(),
    findings: z.number().optional(),
    driftStatus: z.string().optional(),
    written: z.number().optional(),
    deleted: z.number().optional(),
  });
  const proposal = z.object({
    id: z.string(),
    environmentId: z.string(),
    tenantId: z.string(),
    status: z.enum(['open', 'accepted', 'dismissed', 'superseded', 'resolved']),
    fingerprint: z.string(),
    findings: z.array(resourceFindings),
    ignored: z.array(ignoredFinding),
    plan: z.object({
      steps: z.array(z.object({ urn: z.string(), type: z.string(), op: z.enum(['create', 'replace', 'update']), paths: z.array(z.string()).optional() })),
      leftAlone: z.array(z.string()),
      keptByRules: z.array(z.object({ urn: z.string(), path: z.string(), ruleIds: z.array(z.string()) })),
    }),
    createdAt: iso,
    lastSeenAt: iso,
    updatedAt: iso,
    supersededBy: z.string().optional(),
    runId: z.string().optional(),
    decidedBy: z.string().optional(),
    note: z.string().optional(),
  });
  const drift = z.object({
    environment,
    findings: z.array(resourceFindings),
    ignored: z.array(ignoredFinding),
    expiredRules: z.array(z.string()),
    fingerprint: z.string().optional(),
    openProposalId: z.string().optional(),
    scans: z.array(scan),
  });
  const ignoreRule = z.object({
    id: z.string(),
    scope: z.union([z.object({ type: z.string() }), z.object({ urn: z.string() })]),
    path: z.string(),
    reason: z.string(),
    owner: z.string(),
    expiresAt: z.string(),
    holdsOnApply: z.boolean(),
    createdBy: z.string(),
    createdAt: iso,
    deletedBy: z.string().optional(),
    deletedAt: iso.optional(),
  });
  return { environment, drift, scan, proposal, ignoreRule };
};

let built: ReturnType<typeof shapes> | undefined;
const shape = <K extends keyof ReturnType<typeof shapes>>(key: K) => lazySchema((z) => (built ??= shapes(z))[key]);
/** A page of a list: `nextCursor` while more remain. */
const pageOf = (item: () => Zod.ZodType) => lazySchema((z) => z.object({ items: z.array(item()), nextCursor: z.string().optional() }));

export const environmentSchema = shape('environment');
export const environmentPageSchema = pageOf(environmentSchema);
export const driftSchema = shape('drift');
export const scanSchema = shape('scan');
export const proposalSchema = shape('proposal');
export const proposalPageSchema = pageOf(proposalSchema);
export const ignoreRuleSchema = shape('ignoreRule');
export const ignoreRulePageSchema = pageOf(ignoreRuleSchema);
