import { resolve } from 'node:path';
import { z } from 'zod';
import { AppError } from '../../shared/platform/errors/app-error';
import { parseJsonBody, parseQueryParams } from '../../shared/platform/validation/validation';
import { ExternalErrors } from '../../shared/provisioning/external-services.client';
import { createLocalExternalServices, LOCAL_SERVICES, type LocalExternalServices, type LocalServiceName, type Review } from '../external-services/local-external-services.adapter';
import type { HostComponent, HostContext } from '../host';
import { adminOnly } from '../http/raw-problems';
import type { RawRequest, RawResponse } from '../http/http-binding';

const BASE = 'runtime-cloud/local/external-services';

/**
 * The ids these routes look up (runs, policy checks, artifacts): plain characters only. An id that is not one
 * cannot exist, and it never reaches the store (PostgreSQL refuses a text holding NUL with an error, not a miss).
 */
const PLAIN_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$/;

/** The outage switch's body. Changing it is a breaking change for scripts and tests that take a service down. */
const outageSchema = z.strictObject({ unreachable: z.boolean() });

/**
 * A reviewer's decision on a pending policy check: the adapter's `Review`, so a deny carries a reason and an allow
 * none. One object rather than a union keyed by `decision`, so a bad body names every bad field at once. Changing it
 * is a breaking change for scripts and tests that review checks.
 */
const reviewSchema = z
  .strictObject({
    decision: z.enum(['allow', 'deny']),
    by: z.string().min(1).max(200),
    reason: z.string().min(1).max(2000).optional(),
  })
  .superRefine((body, ctx) => {
    if (body.decision === 'deny' && body.reason === undefined) ctx.addIssue({ code: 'custom', path: ['reason'], message: 'a deny needs a reason' });
    if (body.decision === 'allow' && body.reason !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['reason'], message: 'only a deny has a reason: the GovernanceHost keeps none for an allow' });
    }
  })
  // The refinement above guarantees a deny's reason; the fallback only satisfies the type.
  .transform((body): Review => (body.decision === 'deny' ? { decision: 'deny', by: body.by, reason: body.reason ?? '' } : { decision: 'allow', by: body.by }));

const runIdSchema = z.string().regex(PLAIN_ID, 'a run id is 1 to 200 letters, digits, ".", "_", ":" or "-"');
const evidenceQuerySchema = z.object({ runId: runIdSchema });
/** A DeliveryHost report is a tenant's: another tenant's run of the same id is another run. */
const reportsQuerySchema = z.object({ tenant: z.string().regex(PLAIN_ID, 'a tenant is 1 to 200 letters, digits, ".", "_", ":" or "-"'), runId: runIdSchema });

/**
 * Local-only endpoints of the local stand-ins for the external services of provisioning (never registered in
 * Azure): switch a service unreachable, decide a pending policy check as its reviewer, read the GovernanceHost's
 * evidence of a run, a KnowledgeHost artifact and the DeliveryHost's reports of a tenant's run. PlatformAdmin or `factory.runtime.admin` only; errors are
 * problem+json. The switch, the review and the reads work while the service is unreachable: they are the operator's
 * and the reviewer's side of it, not calls a run makes. The stand-ins serve only with the embedded IaC runner
 * (shared/deps.ts); with another runner every route answers 404 `LOCAL_SERVICES.NOT_IN_USE`.
 */
export class LocalExternalServicesEndpoints implements HostComponent {
  readonly name = 'local-external-services-endpoints';

  start(context: HostContext): Promise<void> {
    const { config, deps, http } = context;
    const inUse = config.iac.runner === 'local';
    // A second adapter over the provisioning service's store and state dir (deps does not expose its own): all
    // their state is in the store and the state dir's files, so both see the same switches, checks and artifacts.
    const services = createLocalExternalServices({ store: deps.sql, clock: deps.clock, stateDir: resolve(config.local.stateDir) });
    const route = (method: string, template: string, run: (request: RawRequest) => Promise<RawResponse>) =>
      http.addRawRoute([method], template, (request) =>
        adminOnly(deps.auth, request, () => {
          if (!inUse) throw notInUse(config.iac.runner);
          return run(request);
        }),
      );

    route('POST', `${BASE}/{service}/outage`, (request) => switchOutage(services, request));
    route('POST', `${BASE}/governance/checks/{checkId}/review`, (request) => reviewCheck(services, request));
    route('GET', `${BASE}/governance/evidence`, async (request) => {
      const { runId } = parseQueryParams(request.url.searchParams, evidenceQuerySchema);
      // Not paginated: a run has one evidence per plan it applied, so the list is as short as the run's replans.
      return { status: 200, body: { runId, items: await services.evidenceOf(runId) } };
    });
    route('GET', `${BASE}/delivery/reports`, async (request) => {
      const { tenant, runId } = parseQueryParams(request.url.searchParams, reportsQuerySchema);
      // Not paginated: the DeliveryHost keeps one report per run.
      return { status: 200, body: { tenant, runId, items: await services.reportsOf(tenant, runId) } };
    });
    route('GET', `${BASE}/knowledge/artifacts/{id}`, async (request) => {
      const id = request.params.id ?? '';
      const artifact = PLAIN_ID.test(id) ? await services.artifact(id) : undefined;
      if (!artifact) throw new AppError('LOCAL_SERVICES.ARTIFACT_NOT_FOUND', 'not-found', `the KnowledgeHost has no artifact ${id}`, { id });
      return { status: 200, body: { id, ...artifact } };
    });
    return Promise.resolve();
  }

  stop(): Promise<void> {
    return Promise.resolve();
  }
}

async function switchOutage(services: LocalExternalServices, request: RawRequest): Promise<RawResponse> {
  const service = serviceParam(request);
  const body = parseJsonBody(request.body.toString('utf8'), outageSchema);
  await services.setReachable(service, !body.unreachable);
  return { status: 200, body: { service, reachable: !body.unreachable } };
}

async function reviewCheck(services: LocalExternalServices, request: RawRequest): Promise<RawResponse> {
  const checkId = request.params.checkId ?? '';
  // Validated before the check is looked up: a bad review is the client's fault whether or not the check exists.
  const review = parseJsonBody(request.body.toString('utf8'), reviewSchema);
  // The adapter answers an unknown check with PROVISIONING.POLICY_CHECK_UNKNOWN (404) and a decided one with
  // PROVISIONING.POLICY_CHECK_DECIDED (409); an id that cannot be one is answered the same way without asking it.
  if (!PLAIN_ID.test(checkId)) throw new AppError(ExternalErrors.policyCheckUnknown, 'not-found', `the GovernanceHost has no policy check ${checkId}`, { checkId });
  await services.reviewCheck(checkId, review);
  return { status: 200, body: { checkId, ...review } };
}

/** The service named by the path; the route matches case-insensitively, the names do not. */
function serviceParam(request: RawRequest): LocalServiceName {
  const name = request.params.service ?? '';
  const known = LOCAL_SERVICES.find((s) => s === name);
  if (!known) {
    throw new AppError('LOCAL_SERVICES.UNKNOWN_SERVICE', 'not-found', `no local external service ${name}; the known ones are ${LOCAL_SERVICES.join(', ')}`, {
      service: name,
      known: LOCAL_SERVICES,
    });
  }
  return known;
}

function notInUse(runner: string): AppError {
  return new AppError(
    'LOCAL_SERVICES.NOT_IN_USE',
    'not-found',
    `this host's provisioning does not use the local external services: they serve the embedded IaC runner, and RuntimeCloud__IaC__Runner is ${runner}`,
    { runner },
  );
}
