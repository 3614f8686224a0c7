import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { LocalExternalServicesEndpoints } from '../../local/local-endpoints/external-services-endpoints';
import { ExternalErrors, type ApplyEvidence, type PolicyInput } from '../../shared/provisioning/external-services.client';
import { createLocalExternalServices, LOCAL_SERVICES, type LocalExternalServices, type LocalServiceName } from '../../local/external-services/local-external-services.adapter';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { startTestHost, type TestHost } from '../support/local-host';
import { refusal } from '../support/refusal';
import { expectProblem, fieldsOf } from '../support/problems';

/**
 * The local-only endpoints of the external services' stand-ins, on a local host started in this process with its
 * full set of components, on SQLite and PostgreSQL. What they did is read back through a second adapter over the
 * host's own store and state dir, as the host's provisioning service would see it.
 */

const BASE = '/runtime-cloud/local/external-services';
const outage = (service: string) => `${BASE}/${service}/outage`;
const review = (checkId: string) => `${BASE}/governance/checks/${checkId}/review`;
const EVIDENCE = `${BASE}/governance/evidence`;
const artifactPath = (id: string) => `${BASE}/knowledge/artifacts/${id}`;
const REPORTS = `${BASE}/delivery/reports`;
const admin = { roles: ['PlatformAdmin'] };
const REVIEWED = 'env-reviewed';
/** Sends plans of the environment `REVIEWED` to review; every other plan is allowed by no policy. */
const REVIEW_POLICY = { policies: [{ id: 'change-review', environments: [REVIEWED], review: true, reason: 'changes of this environment are reviewed' }] };



for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`local external services endpoints on a local host on ${dialect}`, () => {
    let database: TestDatabase;
    let host: TestHost;
    let services: LocalExternalServices;
    let runs = 0;

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
      host = await startTestHost({ settings: database.settings, depsOverrides: database.overrides });
      writeFileSync(join(host.stateDir, 'governance.json'), JSON.stringify(REVIEW_POLICY));
      services = createLocalExternalServices({ store: host.host.deps.sql, clock: host.host.deps.clock, stateDir: host.stateDir });
    });
    afterEach(async () => {
      // A failed test leaves no service down for the next one.
      for (const service of LOCAL_SERVICES) await services.setReachable(service, true);
    });
    afterAll(async () => {
      await host?.stop();
      await database?.drop();
    });

    const call = (method: string, path: string, body?: unknown, claims: object | null = admin) =>
      host.fetch(path, {
        method,
        ...(claims ? { claims } : {}),
        ...(body === undefined ? {} : { headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) }),
      });
    const expectOk = async (response: Response): Promise<unknown> => {
      expect(response.status).toBe(200);
      return response.json();
    };

    const planOf = (environmentId: string): PolicyInput => ({
      runId: `run-${dialect}-${++runs}`,
      tenant: 'demo-team',
      environment: { id: environmentId, name: environmentId, tier: 'development' },
      stack: 'development',
      planDigest: `sha256:${runs}`,
      steps: [{ urn: 'urn:pulumi:development::demo::local:storage:Bucket::b', type: 'local:storage:Bucket', op: 'create' }],
    });
    async function pendingCheck(): Promise<string> {
      const answer = await services.governance.decide(planOf(REVIEWED));
      if (answer.decision !== 'pending') throw new Error(`expected a pending check, got ${JSON.stringify(answer)}`);
      return answer.checkId;
    }
    const evidenceOf = (runId: string, planDigest: string): ApplyEvidence => ({
      runId,
      tenant: 'demo-team',
      environment: 'env-demo-development',
      stack: 'development',
      planDigest,
      result: 'applied',
      applyReceiptArtifact: 'art-0',
      at: '2026-03-01T09:00:00.000Z',
    });

    /** One call a run makes through each service, and what it answers while the service is reachable. */
    const probes: Record<LocalServiceName, { readonly code: string; readonly call: () => Promise<unknown>; readonly answer: unknown }> = {
      governance: { code: ExternalErrors.governanceUnavailable, call: () => services.governance.decide(planOf('env-plain')), answer: { decision: 'allow', policies: [] } },
      'control-plane': { code: ExternalErrors.controlPlaneUnavailable, call: () => services.controlPlane.editions(), answer: [] },
      knowledge: {
        code: ExternalErrors.knowledgeUnavailable,
        call: () => services.knowledge.putReceipt({ runId: 'run-probe', tenant: 'demo-team', kind: 'plan-receipt', content: { probe: true } }),
        answer: expect.stringMatching(/^art-/),
      },
      // The example component wrote the reference store on the host's first start.
      'config-platform': { code: ExternalErrors.configUnavailable, call: () => services.configPlatform.resolve('platform://app/feature-flags', { tenant: 'demo-team' }), answer: '{"newCheckout":false}' },
      // No delivery.json: every release is known and pins no desired state.
      delivery: { code: ExternalErrors.deliveryUnavailable, call: () => services.delivery.resolveRelease('demo-team', { name: 'demo-app', version: '1.0.0' }), answer: { name: 'demo-app', version: '1.0.0' } },
    };
    const expectAllReachableBut = async (down?: LocalServiceName) => {
      for (const service of LOCAL_SERVICES) {
        if (service !== down) expect(await probes[service].call(), service).toEqual(probes[service].answer);
      }
    };

    it('when each service is switched unreachable, then its calls fail with its unavailable code, the others answer, and switched back it answers again', async () => {
      for (const service of LOCAL_SERVICES) {
        const down = await call('POST', outage(service), { unreachable: true });

        expect(await expectOk(down)).toEqual({ service, reachable: false });
        expect(await refusal(probes[service].call())).toMatchObject({ code: probes[service].code, kind: 'unavailable' });
        await expectAllReachableBut(service);
        // The switch works while the service is down, or it could never be switched back.
        expect(await expectOk(await call('POST', outage(service), { unreachable: true }))).toEqual({ service, reachable: false });
        expect(await refusal(probes[service].call())).toMatchObject({ code: probes[service].code });

        const up = await call('POST', outage(service), { unreachable: false });

        expect(await expectOk(up)).toEqual({ service, reachable: true });
        await expectAllReachableBut();
      }
    });

    it('when the service is not one of the stand-ins, then the switch answers 404 naming the known ones and switches nothing', async () => {
      for (const name of ['secret-broker', 'Governance', 'governance%20']) {
        const problem = await expectProblem(await call('POST', outage(name), { unreachable: true }), 404, 'LOCAL_SERVICES.UNKNOWN_SERVICE');
        expect(problem).toMatchObject({ service: decodeURIComponent(name), known: [...LOCAL_SERVICES] });
      }

      await expectAllReachableBut();
    });

    it('when a pending check is allowed, then the GovernanceHost answers allow, and a second review answers 409 and changes nothing', async () => {
      const checkId = await pendingCheck();

      const allowed = await call('POST', review(checkId), { decision: 'allow', by: 'reviewer-1' });
      const again = await call('POST', review(checkId), { decision: 'deny', by: 'reviewer-2', reason: 'second thoughts' });

      expect(await expectOk(allowed)).toEqual({ checkId, decision: 'allow', by: 'reviewer-1' });
      expect(await expectProblem(again, 409, 'PROVISIONING.POLICY_CHECK_DECIDED')).toMatchObject({ checkId });
      expect(await services.governance.policyCheck(checkId)).toEqual({ decision: 'allow', policies: ['change-review'] });
    });

    it('when a pending check is denied while the GovernanceHost is unreachable, then the review stands and the check answers deny with the reviewer and reason', async () => {
      const checkId = await pendingCheck();
      await expectOk(await call('POST', outage('governance'), { unreachable: true }));

      const denied = await call('POST', review(checkId), { decision: 'deny', by: 'reviewer-2', reason: 'too many buckets' });

      expect(await expectOk(denied)).toEqual({ checkId, decision: 'deny', by: 'reviewer-2', reason: 'too many buckets' });
      expect(await refusal(services.governance.policyCheck(checkId))).toMatchObject({ code: ExternalErrors.governanceUnavailable });
      await expectOk(await call('POST', outage('governance'), { unreachable: false }));
      expect(await services.governance.policyCheck(checkId)).toEqual({
        decision: 'deny',
        policy: 'change-review',
        reason: `denied in review by reviewer-2: too many buckets (check ${checkId})`,
      });
    });

    it('when the check is unknown or its id cannot be one, then the review answers 404 POLICY_CHECK_UNKNOWN', async () => {
      for (const checkId of ['chk-00000000000000000000000000000000', 'chk%00x', '..%2Fchk', 'x'.repeat(201)]) {
        const problem = await expectProblem(await call('POST', review(checkId), { decision: 'allow', by: 'reviewer-1' }), 404, ExternalErrors.policyCheckUnknown);
        expect(problem).toMatchObject({ checkId: decodeURIComponent(checkId) });
      }
    });

    it('when a run has evidence, then the evidence read answers exactly its items, also while the GovernanceHost is unreachable', async () => {
      const mine = evidenceOf(`run-evidence-${dialect}`, 'sha256:mine');
      await services.governance.recordEvidence(mine);
      await services.governance.recordEvidence(evidenceOf(`run-evidence-other-${dialect}`, 'sha256:other'));
      await expectOk(await call('POST', outage('governance'), { unreachable: true }));

      const read = await call('GET', `${EVIDENCE}?runId=${mine.runId}`);
      const none = await call('GET', `${EVIDENCE}?runId=run-without-evidence`);

      expect(await expectOk(read)).toEqual({ runId: mine.runId, items: [mine] });
      expect(await expectOk(none)).toEqual({ runId: 'run-without-evidence', items: [] });
    });

    it('when a run was reported to the DeliveryHost, then the reports read answers its tenant\'s report only, also while the DeliveryHost is unreachable', async () => {
      const report = (tenant: string, reason: string) => ({
        tenant,
        runId: `run-reported-${dialect}`,
        promotionId: 'prm-reported',
        release: { name: 'demo-app', version: '1.0.0' },
        environmentId: 'env-demo-development',
        outcome: 'failed' as const,
        state: 'rejected',
        code: 'PROVISIONING.RELEASE_MISMATCH',
        reason,
        receipts: [],
        finishedAt: '2026-03-01T09:00:00.000Z',
      });
      await services.delivery.reportOutcome(report('demo-team', 'the first report'));
      await services.delivery.reportOutcome(report('demo-team', 'a repeat'));
      await services.delivery.reportOutcome(report('other-team', 'the other tenant\'s run of the same id'));
      await expectOk(await call('POST', outage('delivery'), { unreachable: true }));

      const mine = await call('GET', `${REPORTS}?tenant=demo-team&runId=run-reported-${dialect}`);
      const none = await call('GET', `${REPORTS}?tenant=third-team&runId=run-reported-${dialect}`);

      expect(await expectOk(mine)).toEqual({ tenant: 'demo-team', runId: `run-reported-${dialect}`, items: [report('demo-team', 'the first report')] });
      expect(await expectOk(none)).toEqual({ tenant: 'third-team', runId: `run-reported-${dialect}`, items: [] });
      for (const query of ['', '?runId=run-x', '?tenant=demo-team', '?tenant=a%00b&runId=run-x']) {
        expect(await expectProblem(await call('GET', `${REPORTS}${query}`), 400, 'REQUEST.INVALID_QUERY')).toBeDefined();
      }
    });

    it('when an artifact is stored, then the artifact read answers it, also while the KnowledgeHost is unreachable, and an unknown id answers 404', async () => {
      const content = { runId: 'run-artifact', steps: [{ op: 'create' }] };
      const id = await services.knowledge.putReceipt({ runId: 'run-artifact', tenant: 'demo-team', kind: 'apply-receipt', content });
      await expectOk(await call('POST', outage('knowledge'), { unreachable: true }));

      const read = await call('GET', artifactPath(id));

      expect(await expectOk(read)).toEqual({ id, runId: 'run-artifact', kind: 'apply-receipt', content });
      for (const unknown of ['art-00000000000000000000000000000000', 'art%00x', 'x'.repeat(201)]) {
        const problem = await expectProblem(await call('GET', artifactPath(unknown)), 404, 'LOCAL_SERVICES.ARTIFACT_NOT_FOUND');
        expect(problem).toMatchObject({ id: decodeURIComponent(unknown) });
      }
    });

    it('when bodies or the query are not valid, then 400 problem+json names the fields and nothing changes', async () => {
      const checkId = await pendingCheck();
      const invalidBody = async (path: string, body: unknown) => fieldsOf(await expectProblem(await call('POST', path, body), 400, 'REQUEST.INVALID'));

      expect(await invalidBody(outage('governance'), { unreachable: 'yes' })).toEqual(['unreachable']);
      expect(await invalidBody(outage('governance'), {})).toEqual(['unreachable']);
      expect(await invalidBody(outage('governance'), '')).toEqual(['unreachable']);
      expect(await invalidBody(outage('governance'), { unreachable: true, extra: 1 })).toEqual(['(body)']);
      expect(await invalidBody(outage('governance'), [true])).toEqual(['(body)']);
      await expectProblem(await call('POST', outage('governance'), '{"unreachable":'), 400, 'REQUEST.MALFORMED_JSON');
      expect(await invalidBody(review(checkId), { decision: 'maybe', by: '' })).toEqual(['by', 'decision']);
      expect(await invalidBody(review(checkId), { decision: 'deny', by: 'reviewer-1' })).toEqual(['reason']);
      expect(await invalidBody(review(checkId), { decision: 'allow', by: 'reviewer-1', reason: 'fine' })).toEqual(['reason']);
      expect(await invalidBody(review(checkId), { decision: 'allow', by: 'r'.repeat(201) })).toEqual(['by']);
      expect(await invalidBody(review(checkId), { decision: 'deny', by: 'reviewer-1', reason: 'r'.repeat(2001) })).toEqual(['reason']);
      expect(await invalidBody(review(checkId), { decision: 'deny', by: 'reviewer-1', reason: '' })).toEqual(['reason']);
      expect(await invalidBody(review(checkId), { decision: 'allow', by: 'reviewer-1', comment: 'x' })).toEqual(['(body)']);
      expect(await invalidBody(review(checkId), { decision: 'allow', by: 7 })).toEqual(['by']);
      // The body is checked before the check is looked up.
      expect(await invalidBody(review('chk-unknown'), { decision: 'allow' })).toEqual(['by']);
      await expectProblem(await call('POST', review(checkId), 'decision=allow'), 400, 'REQUEST.MALFORMED_JSON');
      for (const query of ['', '?runId=', '?runId=a%00b', `?runId=${'r'.repeat(201)}`]) {
        expect(fieldsOf(await expectProblem(await call('GET', `${EVIDENCE}${query}`), 400, 'REQUEST.INVALID_QUERY'))).toEqual(['runId']);
      }

      await expectAllReachableBut();
      expect(await services.governance.policyCheck(checkId)).toEqual({ decision: 'pending', checkId });
    });

    it('when the token is tenant-bound, read-only or missing, then the routes refuse it and nothing changes', async () => {
      const checkId = await pendingCheck();
      const id = await services.knowledge.putReceipt({ runId: 'run-auth', tenant: 'demo-team', kind: 'plan-receipt', content: { auth: true } });
      const attempts = (claims: object | null) => [
        call('POST', outage('governance'), { unreachable: true }, claims),
        call('POST', review(checkId), { decision: 'allow', by: 'intruder' }, claims),
        call('GET', `${EVIDENCE}?runId=run-auth`, undefined, claims),
        call('GET', artifactPath(id), undefined, claims),
        call('GET', `${REPORTS}?tenant=demo-team&runId=run-auth`, undefined, claims),
      ];

      for (const response of await Promise.all(attempts({ tenant: 'demo-team', roles: ['PlatformAdmin'] }))) await expectProblem(response, 403, 'AUTH.PLATFORM_ONLY');
      for (const response of await Promise.all(attempts({ roles: ['Observer'] }))) await expectProblem(response, 403, 'AUTH.SCOPE_MISSING');
      for (const response of await Promise.all(attempts(null))) expect(response.status).toBe(401);

      await expectAllReachableBut();
      expect(await services.governance.policyCheck(checkId)).toEqual({ decision: 'pending', checkId });
      // The scope alone, without the role, is enough.
      const scoped = await call('GET', artifactPath(id), undefined, { scopes: ['factory.runtime.admin'] });
      expect(scoped.status).toBe(200);
    });
  });
}

describe('local external services endpoints on a host with the pulumi runner', () => {
  let host: TestHost;

  beforeAll(async () => {
    host = await startTestHost({ settings: { RuntimeCloud__IaC__Runner: 'pulumi' }, components: [new LocalExternalServicesEndpoints()] });
  });
  afterAll(async () => {
    await host?.stop();
  });

  it('when the provisioning service does not use the stand-ins, then every route answers 404 NOT_IN_USE and switches nothing', async () => {
    const attempts = [
      host.fetch(outage('governance'), { method: 'POST', claims: admin, body: JSON.stringify({ unreachable: true }) }),
      host.fetch(review('chk-any'), { method: 'POST', claims: admin, body: JSON.stringify({ decision: 'allow', by: 'reviewer-1' }) }),
      host.fetch(`${EVIDENCE}?runId=run-any`, { claims: admin }),
      host.fetch(artifactPath('art-any'), { claims: admin }),
    ];

    for (const response of await Promise.all(attempts)) {
      expect(response.status).toBe(404);
      expect(await response.json()).toMatchObject({ code: 'LOCAL_SERVICES.NOT_IN_USE', runner: 'pulumi' });
    }
    const services = createLocalExternalServices({ store: host.host.deps.sql, clock: host.host.deps.clock, stateDir: host.stateDir });
    expect(await services.governance.decide({ runId: 'r', tenant: 't', environment: { id: 'e', name: 'e', tier: 'development' }, stack: 's', planDigest: 'd', steps: [] })).toEqual({
      decision: 'allow',
      policies: [],
    });
  });
});
