/**
 * The groups the OpenAPI document lists its operations under (its top-level `tags`), in the order it lists them, each
 * with what it holds. Every documented `endpoint({ tag })` names one (functions/http/endpoint.ts); the document
 * declares those its operations use (functions/http/openapi.ts). endpoint.ts imports the type only, so registering
 * the functions loads none of this text.
 */
export const API_TAGS = {
  Runs: 'Provisioning runs: a promotion, an accepted reconciliation proposal or a pool resize made into a recorded run (plan receipt, approval where required, apply receipt). Read a run and its receipts, or cancel one still queued.',
  Approvals: "Decisions on a run's plan: approve it by its digest, reject it, or replan a run whose plan went stale. Recorded with who decided; where the environment needs a second person, the requester cannot approve.",
  Stacks: "A stack's lock (a lease in the store that plans and applies hold): who holds it, and breaking it when its holder hung.",
  'Runner pools': 'The runner agent pools that run plans and applies on each target, as operators see them: tenants served, agents online, jobs running and waiting.',
  'Runner agents': "The runner agents' protocol: claim the next job of the pool, beat while running it, post its outcome. Called with the pool's credential, and on a claimed job's calls with the job's token too.",
  Environments: "A tenant's environments as inventory knows them: desired release, last run, drift status and scanning.",
  'Inventory and drift': "What runs in an environment (observed inventory), how it differs from the desired state (drift findings), and the environment's scans: scan now, pause or resume the scheduled ones.",
  'Ignore rules': 'Recorded rules that set drift findings aside (a resource type or urn, a property path, why, whose, until when), listed with the findings they match rather than dropped.',
  Proposals: 'Reconciliation proposals opened by drift scans: accept one to make it a provisioning run, or dismiss it with a reason.',
  Leases: 'Time-limited capacity leases with fencing tokens, for attempts, sandboxes, builds, browser sessions and runner jobs: acquire, renew, release, list.',
  Capacity: "Pools, editions (per-kind quotas) and each tenant's edition: the capacity summary, and their platform administration.",
  Health: "The host's dependency health and liveness, and its metrics.",
  Meta: "What this host is: its provisioning targets with their runners, and this document.",
} as const satisfies Record<string, string>;

/** The name of a group of operations in the OpenAPI document. Example: `'Leases'`. */
export type ApiTag = keyof typeof API_TAGS;
