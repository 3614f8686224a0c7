import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as git from 'isomorphic-git';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { EXAMPLES_DIR, EXAMPLE_PROJECT_PATH, ensureExampleRepository } from '../../local/example-repository';
import { collectReferences, type JsonValue } from '../../shared/platform/iac/iac-values';
import { runCli, startChildHost, type RunningChild } from '../support/child-process';

/**
 * The walk-through, docs/walkthrough.md, step by step, against `runtime-cloud start` in a child process
 * on a fresh state dir: the same CLI commands (token, example promotion) and the same HTTP calls.
 */

interface RunBody {
  runId: string;
  promotionId: string;
  state: string;
  approvalRequired?: boolean;
  planDigest?: string;
  waitingFor?: { kind: string; planDigest?: string };
  planReceipt?: { plan: { digest: string; counts: Record<string, number> } };
  applyReceipt?: { result: { status: string } };
}
interface TopicMessage {
  sequenceNumber: number;
  correlationId: string | null;
  body: { type: string; data: { promotionId?: string; runId?: string } };
}

describe('the provisioning walk-through on runtime-cloud start (a real process on a temporary state dir)', () => {
  const stateDir = fs.mkdtempSync(join(tmpdir(), 'rch-walkthrough-'));
  let host: RunningChild;
  /** Every answer body read from the host, to look for secret values in. */
  const answers: string[] = [];
  let admin: string;
  let operator: string;
  let requester: string;

  beforeAll(async () => {
    host = await startChildHost(stateDir);
    admin = await cli('token', '--role', 'PlatformAdmin');
    operator = await cli('token', '--tenant', 'demo-team', '--role', 'Operator', '--subject', 'operator-1');
    // The token's default subject, who the example promotions say asked for their runs.
    requester = await cli('token', '--tenant', 'demo-team', '--role', 'Operator');
  }, 90_000);
  afterAll(async () => {
    await host?.stop();
    fs.rmSync(stateDir, { recursive: true, force: true });
  });

  /** Runs a CLI command on the walk-through's state dir (as `npm run -s …` there) and answers its stdout. */
  async function cli(...args: string[]): Promise<string> {
    const result = await runCli([...args, '--state-dir', stateDir]);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    return result.stdout.trim();
  }

  async function call(path: string, bearer: string, body?: unknown): Promise<{ status: number; json: unknown }> {
    const response = await fetch(new URL(path, host.url), {
      method: body === undefined ? 'GET' : 'POST',
      headers: { authorization: `Bearer ${bearer}` },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await response.text();
    answers.push(text);
    return { status: response.status, json: JSON.parse(text) as unknown };
  }

  async function send(promotion: string): Promise<void> {
    const sent = await call('/runtime-cloud/local/queues/runtime-cloud-promotions/messages', admin, { body: JSON.parse(promotion) as unknown });
    expect(sent.status).toBe(201);
  }

  /** Watches the promotion's run (GET /runs?environment=) until its state is one of `states`; answers it and every state seen. */
  async function watch(environment: string, promotionId: string, states: readonly string[]): Promise<{ run: RunBody; seen: string[] }> {
    const seen: string[] = [];
    const run = await vi.waitFor(
      async () => {
        const page = await call(`/runtime-cloud/runs?environment=${environment}&limit=1000`, operator);
        expect(page.status).toBe(200);
        const found = (page.json as { items: RunBody[] }).items.find((r) => r.promotionId === promotionId);
        if (found && seen[seen.length - 1] !== found.state) seen.push(found.state);
        if (!found || !states.includes(found.state)) throw new Error(`run of ${promotionId}: ${found?.state ?? 'not taken in yet'}`);
        return found;
      },
      { timeout: 30_000, interval: 50 },
    );
    return { run, seen };
  }

  it('when the host starts on a fresh state dir, then the example repository and a references.json with every reference of the example exist', async () => {
    // Assert: the repository holds the examples at a commit on main.
    const gitdir = join(stateDir, 'desired-state.git');
    const commit = await git.resolveRef({ fs, gitdir, ref: 'refs/heads/main' });
    const files = await git.listFiles({ fs, gitdir, ref: commit });
    expect(files.sort()).toEqual(fs.readdirSync(join(EXAMPLES_DIR, EXAMPLE_PROJECT_PATH)).map((f) => `${EXAMPLE_PROJECT_PATH}/${f}`).sort());

    // Assert: every reference any example stack file names has a value, in a file only its owner can read.
    const file = join(stateDir, 'references.json');
    const store = JSON.parse(fs.readFileSync(file, 'utf8')) as { secrets: Record<string, string>; config: Record<string, string> };
    const stackFiles = files.filter((f) => /\/Pulumi\.[^/]+\.yaml$/.test(f));
    expect(stackFiles.length).toBeGreaterThanOrEqual(2);
    for (const stackFile of stackFiles) {
      for (const reference of collectReferences(parseYaml(fs.readFileSync(join(EXAMPLES_DIR, stackFile), 'utf8')) as JsonValue)) {
        if ('secretRef' in reference) expect(store.secrets, stackFile).toHaveProperty([reference.secretRef]);
        else expect(store.config, stackFile).toHaveProperty([reference.configRef]);
      }
    }
    expect(fs.statSync(file).mode & 0o077).toBe(0);
  });

  it('when a development promotion is sent, then its run is applied without approval', async () => {
    // Arrange
    const promotion = await cli('example', 'promotion', 'development');
    const { promotionId } = JSON.parse(promotion) as { promotionId: string };

    // Act
    await send(promotion);
    const { run, seen } = await watch('development', promotionId, ['applied', 'failed', 'rejected']);

    // Assert
    expect(run).toMatchObject({ state: 'applied', approvalRequired: false });
    expect(seen[seen.length - 1]).toBe('applied');
  });

  it('when a production promotion is sent, then it waits for approval of its plan digest; another digest is refused, as is its requester, its own by another applies it', async () => {
    // Arrange
    const promotion = await cli('example', 'promotion', 'production');
    const { promotionId } = JSON.parse(promotion) as { promotionId: string };
    await send(promotion);
    const { run: waiting } = await watch('production', promotionId, ['awaiting-approval', 'failed', 'rejected']);
    const detail = (await call(`/runtime-cloud/runs/${waiting.runId}`, operator)).json as RunBody;
    const digest = detail.planReceipt?.plan.digest ?? '';

    // Act
    const wrong = await call(`/runtime-cloud/runs/${waiting.runId}/approve`, operator, { planDigest: `sha256:${'0'.repeat(64)}` });
    const selfApproved = await call(`/runtime-cloud/runs/${waiting.runId}/approve`, requester, { planDigest: digest });
    const approved = await call(`/runtime-cloud/runs/${waiting.runId}/approve`, operator, { planDigest: digest, comment: 'read the plan' });
    const { run } = await watch('production', promotionId, ['applied', 'failed']);

    // Assert
    expect(detail).toMatchObject({ state: 'awaiting-approval', planDigest: digest, waitingFor: { kind: 'approval', planDigest: digest } });
    expect(detail.planReceipt?.plan.counts).toMatchObject({ create: 3 });
    expect(wrong).toMatchObject({ status: 409, json: { code: 'PROVISIONING.PLAN_DIGEST_MISMATCH' } });
    expect(selfApproved).toMatchObject({ status: 403, json: { code: 'PROVISIONING.SELF_APPROVAL' } });
    expect(approved).toMatchObject({ status: 200, json: { state: 'applying' } });
    expect(run.state).toBe('applied');
  });

  it('when the events are read from the embedded topic, then each run published SpecificationDeclared, SpecificationApplied and ProvisioningApplied', async () => {
    // Arrange
    const runs = ((await call('/runtime-cloud/runs?limit=1000', operator)).json as { items: RunBody[] }).items;
    expect(runs.map((r) => r.state)).toEqual(['applied', 'applied']);

    // Act: the relay publishes every two seconds.
    const events = await vi.waitFor(
      async () => {
        const page = await call('/runtime-cloud/local/topics/runtime-cloud-events/messages?after=0', admin);
        const items = (page.json as { items: TopicMessage[] }).items;
        if (items.filter((m) => m.body.type === 'ProvisioningApplied').length < runs.length) throw new Error('not published yet');
        return items;
      },
      { timeout: 15_000, interval: 200 },
    );

    // Assert
    for (const run of runs) {
      const ofRun = events.filter((m) => m.correlationId === run.runId);
      expect(ofRun.map((m) => m.body.type)).toEqual(['SpecificationDeclared', 'SpecificationApplied', 'ProvisioningApplied']);
      expect(ofRun[2]?.body.data).toMatchObject({ runId: run.runId, promotionId: run.promotionId });
    }
  });

  it('when the DeliveryHost stand-in\'s reports are read, then each run was reported applied, with its plan and apply receipts\' digests', async () => {
    const runs = ((await call('/runtime-cloud/runs?limit=1000', operator)).json as { items: RunBody[] }).items;

    for (const run of runs) {
      // The reports go out every five seconds.
      const reports = await vi.waitFor(
        async () => {
          const page = await call(`/runtime-cloud/local/external-services/delivery/reports?tenant=demo-team&runId=${run.runId}`, admin);
          const items = (page.json as { items: { outcome: string; state: string; promotionId: string; receipts: { kind: string }[] }[] }).items;
          if (items.length === 0) throw new Error(`run ${run.runId} not reported yet`);
          return items;
        },
        { timeout: 20_000, interval: 200 },
      );

      expect(reports).toEqual([expect.objectContaining({ outcome: 'applied', state: 'applied', promotionId: run.promotionId })]);
      expect(reports[0]?.receipts.map((r) => r.kind)).toEqual(['plan-receipt', 'apply-receipt']);
    }
  });

  it('when the stand-in\'s delivery.json pins the example\'s release to another path, then the next promotion of it is a rejected run with RELEASE_MISMATCH', async () => {
    // Arrange: as the walk-through's step 5.
    const promotion = await cli('example', 'promotion', 'development');
    const parsed = JSON.parse(promotion) as { promotionId: string; tenantId: string; release: object; desiredState: { repository: string; commit: string } };
    const file = join(stateDir, 'delivery.json');
    fs.writeFileSync(file, JSON.stringify({ releases: [{ tenant: parsed.tenantId, ...parsed.release, repository: parsed.desiredState.repository, commit: parsed.desiredState.commit, path: 'elsewhere' }] }));
    try {
      // Act
      await send(promotion);
      const { run } = await watch('development', parsed.promotionId, ['applied', 'failed', 'rejected']);

      // Assert
      expect(run.state).toBe('rejected');
      expect((run as RunBody & { error?: { code: string } }).error?.code).toBe('PROVISIONING.RELEASE_MISMATCH');
    } finally {
      fs.rmSync(file, { force: true });
    }
  });

  it('when the walk-through has run, then no secret value from references.json is in any answer or in the host output', () => {
    const store = JSON.parse(fs.readFileSync(join(stateDir, 'references.json'), 'utf8')) as { secrets: Record<string, string> };
    const values = Object.values(store.secrets);
    expect(values.length).toBeGreaterThan(0);
    const everything = [...answers, host.output()].join('\n');
    for (const value of values) expect(everything).not.toContain(value);
    expect(host.output()).not.toMatch(/"level":"(error|critical)"/);
  });

  it('when the walk-through has run, then every host log line is JSON with its correlation ids, and no line holds a token the host was sent', async () => {
    // A refused token is a request the host must not log either.
    const forged = `${admin.split('.').slice(0, 2).join('.')}.AAAA`;
    expect((await call('/runtime-cloud/runs', forged)).status).toBe(401);

    const lines = host.output().split('\n').filter((line) => line.trim() !== '');
    const own = lines.filter((line) => !line.startsWith('{'));
    expect(own.every((line) => /^(runtime-cloud listening on |the operator console: |the LeaseService \(gRPC, gRPC-Web, Connect\): )/.test(line)), own.join('\n')).toBe(true);
    const entries = lines.filter((line) => line.startsWith('{')).map((line) => JSON.parse(line) as Record<string, string>);
    expect(entries.every((e) => typeof e.time === 'string' && typeof e.level === 'string' && typeof e.message === 'string')).toBe(true);
    const queued = entries.filter((e) => e.function === 'promotionIntake' && e.message === 'promotion queued as a run');
    expect(queued.length).toBeGreaterThanOrEqual(2);
    for (const e of queued) expect(e).toMatchObject({ invocationId: expect.any(String), messageId: expect.any(String), promotionId: expect.any(String), runId: expect.any(String), stack: expect.any(String) });
    for (const token of [admin, operator, requester, forged]) expect(host.output()).not.toContain(token.split('.')[2]);
  });

  it('when the host starts again on a state dir whose repository a developer changed, then the repository and references.json stay as they are', async () => {
    // Arrange: a developer's commit on main (the examples with one more stack), and the references as they are.
    const source = join(stateDir, 'developer-source');
    fs.cpSync(EXAMPLES_DIR, source, { recursive: true });
    fs.copyFileSync(join(source, EXAMPLE_PROJECT_PATH, 'Pulumi.development.yaml'), join(source, EXAMPLE_PROJECT_PATH, 'Pulumi.qa.yaml'));
    const changed = await ensureExampleRepository(stateDir, { source });
    const references = fs.readFileSync(join(stateDir, 'references.json'), 'utf8');
    await host.stop();

    // Act
    host = await startChildHost(stateDir);

    // Assert: a start that made the repository again would have put the examples back on main.
    expect(await git.resolveRef({ fs, gitdir: changed.path, ref: 'refs/heads/main' })).toBe(changed.commit);
    expect(fs.readFileSync(join(stateDir, 'references.json'), 'utf8')).toBe(references);
  }, 90_000);
});
