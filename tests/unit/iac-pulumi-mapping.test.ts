import { DiffKind, type EngineEvent, type OpType, type StepEventMetadata, type StepEventStateMetadata } from '@pulumi/pulumi/automation';
import { describe, expect, it } from 'vitest';
import { thrown } from '../support/refusal';
import { computed } from '../../shared/platform/iac/iac-values';
import { planDigest, planSchema, type Plan } from '../../shared/platform/iac/plan';
import { applyResultFromUp } from '../../shared/platform/iac/pulumi-apply-mapping';
import { collapseOps, countsFromChangeSummary, maskOutputs, maskValue, PULUMI_SECRET_SIG, PULUMI_SIG_KEY, PULUMI_UNKNOWN, PULUMI_UNKNOWN_EXPRESSION, stepOpOf, urnName } from '../../shared/platform/iac/pulumi-mapping';
import { parseUpdatePlan, planCovers, planFromPreview, type PreviewObservation, type PulumiUpdatePlan } from '../../shared/platform/iac/pulumi-plan-mapping';

/*
 * HAND-WRITTEN engine event sequences, in exactly the shapes of `@pulumi/pulumi/automation`'s typed events
 * (events.d.ts: EngineEvent, ResourcePreEvent, ResOutputsEvent, ResOpFailedEvent, DiagnosticEvent, SummaryEvent,
 * StepEventMetadata, StepEventStateMetadata) and of the update plan file (apitype.DeploymentPlanV1), for a project
 * `shop`, stack `dev`: a stack, a default provider, a network `net` and a database `db` whose `password` is a
 * secret; a second update changes a tag of `net`, replaces `db` (its sku) and deletes `cache`.
 *
 * The mapping is tested on what Pulumi published in iac-pulumi-published.test.ts (the published fixtures:
 * docs/testing.md, "Published fixtures"): creates (up-3), an in-place update with detailedDiff (up-4), replaces
 * (webserver-userdata, TestDetailedDiffReplace), deletes (destroy-with-components), stack outputs
 * (stack-output-resource-diff, yaml-text-change), failed operations without and with diagnostics
 * (failed-stacks-dont-rewrite-operations, TestUpContinueOnErrorUpdate), a mandatory policy violation
 * (TestSimpleAnalyzeResourceFailure) and both published update plans. The cases below stay hand-written because no
 * published stream or plan shows them; each would be covered by the published stream named, and none is published:
 * - ops other than create, update, same, delete and the replace halves (import, read, refresh, discard, …; the op
 *   table) and an op this host does not know: a stream with those steps;
 * - a change summary counting a replacement's halves: a summary event with create-replacement/delete-replaced keys;
 * - a URN whose name holds `::`: a stream of such a resource;
 * - secrets in a plan file (encrypted ciphertext) or as plaintext, and `UpResult.outputs` flagged secret or holding a
 *   secret unflagged: a saved plan or an up result with secret values (the published plans hold none; an event
 *   stream never carries UpResult; the only published secret is the blinded `__provider` of
 *   failed-stacks-dont-rewrite-operations, tested there);
 * - a plan file wrapped as `{ version, plan }`: a published plan in that form;
 * - a preview's events together with its own plan file (goals with `dependencies`, `protect: true`, a resource the
 *   events missed) and unknown inputs: a preview stream published with the plan it saved (the published unknowns are
 *   stack outputs, tested on webserver-userdata);
 * - the same preview in another order, or delivered out of sequence: one preview recorded twice (every published
 *   stream is in sequence; the engine's own have every sequence 0);
 * - a provider giving `diffs`/`keys` without `detailedDiff`: a stream of such a provider (every published event
 *   with `diffs` also has `detailedDiff`);
 * - a replace that changes the type (`oldType`): a stream with an alias across types;
 * - a summary reporting more changes than the events (IAC.PULUMI_EVENTS_INCOMPLETE): upstream up-interrupted.json
 *   comes closest and is not among the published fixtures;
 * - an approved plan against the plan made again at apply (planCovers): a preview without secret values and one
 *   with them, of one program;
 * - `up --plan` refusing an operation (PROVISIONING.PLAN_CHANGED), an update the caller cancelled, and a resolved
 *   secret in a diagnostic (redaction): a stream of such an update.
 */

const STACK_URN = 'urn:pulumi:dev::shop::pulumi:pulumi:Stack::shop-dev';
const PROVIDER_URN = 'urn:pulumi:dev::shop::pulumi:providers:local::default';
const NET_URN = 'urn:pulumi:dev::shop::local:network:VirtualNetwork::net';
const DB_URN = 'urn:pulumi:dev::shop::local:sql:Database::db';
const CACHE_URN = 'urn:pulumi:dev::shop::local:cache:Redis::cache';
const PROVIDER_REF = `${PROVIDER_URN}::provider-id-1`;
/** How engine events carry a secret: the signature object with its ciphertext blinded. */
const BLINDED_SECRET = { [PULUMI_SIG_KEY]: PULUMI_SECRET_SIG, ciphertext: '[secret]' };
/** How a plan file carries one: encrypted by the stack's secrets provider. */
const ENCRYPTED_SECRET = { [PULUMI_SIG_KEY]: PULUMI_SECRET_SIG, ciphertext: 'v1:aGVsbG8=:c2VjcmV0LWNpcGhlcnRleHQ=' };
const SECRET_VALUE = 'hunter2-correct-horse';

let sequence = 0;
function event(body: Omit<EngineEvent, 'sequence' | 'timestamp'>): EngineEvent {
  return { sequence: sequence++, timestamp: 1767225600 + sequence, ...body };
}
function state(urn: string, type: string, extra: Partial<StepEventStateMetadata> = {}): StepEventStateMetadata {
  return { urn, type, custom: true, id: '', parent: STACK_URN, inputs: {}, outputs: {}, provider: PROVIDER_REF, ...extra };
}
function metadata(op: OpType, urn: string, type: string, extra: Partial<StepEventMetadata> = {}): StepEventMetadata {
  return { op, urn, type, provider: PROVIDER_REF, ...extra };
}
const pre = (md: StepEventMetadata, planning = true) => event({ resourcePreEvent: { metadata: md, planning } });
const done = (md: StepEventMetadata, planning = true) => event({ resOutputsEvent: { metadata: md, planning } });
const failed = (md: StepEventMetadata) => event({ resOpFailedEvent: { metadata: md, status: 1, steps: 0 } });
const diagnostic = (message: string, urn?: string) => event({ diagnosticEvent: { message, color: 'raw', severity: 'error', ...(urn ? { urn } : {}) } });
const summary = (resourceChanges: Record<string, number>) => event({ summaryEvent: { maybeCorrupt: false, durationSeconds: 2, resourceChanges, policyPacks: {} } });

const STACK = 'pulumi:pulumi:Stack';
const PROVIDER = 'pulumi:providers:local';
const NET = 'local:network:VirtualNetwork';
const DB = 'local:sql:Database';
const CACHE = 'local:cache:Redis';

const netInputs = (env: string) => ({ cidr: '10.0.0.0/16', tags: { env, team: 'core' } });
const dbInputs = (network: string, sku: string) => ({ network, sku, password: BLINDED_SECRET });

/** First preview of an empty stack: everything is created; `db.network` and the `dbId` output are unknown. */
function firstPreview(): EngineEvent[] {
  sequence = 0;
  const stack = metadata('create', STACK_URN, STACK, { new: state(STACK_URN, STACK, { custom: false, parent: '', provider: '' }), provider: '' });
  const provider = metadata('create', PROVIDER_URN, PROVIDER, { new: state(PROVIDER_URN, PROVIDER, { inputs: { version: '1.0.0' }, parent: '', provider: '' }), provider: '' });
  const net = metadata('create', NET_URN, NET, { new: state(NET_URN, NET, { inputs: netInputs('dev') }) });
  const db = metadata('create', DB_URN, DB, { new: state(DB_URN, DB, { inputs: dbInputs(PULUMI_UNKNOWN, 'basic') }) });
  const stackOutputs = metadata('create', STACK_URN, STACK, {
    new: state(STACK_URN, STACK, { custom: false, parent: '', provider: '', outputs: { dbId: PULUMI_UNKNOWN, netCidr: '10.0.0.0/16', connection: BLINDED_SECRET } }),
    provider: '',
  });
  return [
    event({ preludeEvent: { config: { 'shop:dbPassword': '[secret]' } } }),
    pre(stack),
    pre(provider),
    done(provider),
    // The step executor runs independent chains in parallel: db's events may come before net's outputs.
    pre(net),
    pre(db),
    done(net),
    done(db),
    done(stackOutputs),
    summary({ create: 3 }),
  ];
}

function firstUpdatePlan(): PulumiUpdatePlan {
  return parseUpdatePlan({
    manifest: { time: '2026-01-01T00:00:00Z', magic: 'abc', version: 'v3.200.0' },
    config: { 'shop:dbPassword': { secure: 'v1:encrypted' } },
    resourcePlans: {
      [STACK_URN]: { goal: { type: STACK, name: 'shop-dev', custom: false, protect: false }, steps: ['create'], state: {} },
      [PROVIDER_URN]: { goal: { type: PROVIDER, name: 'default', custom: true, protect: false }, steps: ['create'], state: {} },
      [NET_URN]: { goal: { type: NET, name: 'net', custom: true, protect: false, parent: STACK_URN }, steps: ['create'], state: {} },
      [DB_URN]: {
        goal: { type: DB, name: 'db', custom: true, protect: true, parent: STACK_URN, dependencies: [NET_URN], inputDiff: { adds: { password: ENCRYPTED_SECRET } } },
        steps: ['create'],
        state: {},
      },
    },
  });
}

function observation(events: EngineEvent[], updatePlan: PulumiUpdatePlan, extra: Partial<PreviewObservation> = {}): PreviewObservation {
  const summaryEvent = events.find((e) => e.summaryEvent)?.summaryEvent;
  return { stack: 'dev', project: 'shop', baseSerial: 0, events, updatePlan, changeSummary: summaryEvent?.resourceChanges, references: [], ...extra };
}

const oldNet = () => state(NET_URN, NET, { id: 'net-1', inputs: netInputs('dev'), outputs: { ...netInputs('dev'), id: 'net-1' } });
const oldDb = () => state(DB_URN, DB, { id: 'db-1', inputs: dbInputs('net-1', 'basic'), outputs: { id: 'db-1' } });

/** Second preview: net's tag changes, db is replaced (sku), cache is deleted; stack and provider stay. */
function secondPreview(): EngineEvent[] {
  sequence = 0;
  const same = (urn: string, type: string) => metadata('same', urn, type, { old: state(urn, type), new: state(urn, type), provider: '' });
  const net = metadata('update', NET_URN, NET, {
    old: oldNet(),
    new: state(NET_URN, NET, { id: 'net-1', inputs: netInputs('staging') }),
    diffs: ['tags'],
    detailedDiff: { 'tags.env': { diffKind: DiffKind.update, inputDiff: true } },
  });
  const replacement = (op: OpType) =>
    metadata(op, DB_URN, DB, {
      old: oldDb(),
      new: state(DB_URN, DB, { inputs: dbInputs('net-1', 'premium') }),
      keys: ['sku'],
      diffs: ['sku'],
      detailedDiff: { sku: { diffKind: DiffKind.updateReplace, inputDiff: true } },
    });
  const cache = metadata('delete', CACHE_URN, CACHE, { old: state(CACHE_URN, CACHE, { id: 'cache-1', protect: false }) });
  return [
    pre(same(STACK_URN, STACK)),
    done(same(STACK_URN, STACK)),
    pre(metadata('delete', CACHE_URN, CACHE, { old: state(CACHE_URN, CACHE, { id: 'cache-1' }) })),
    pre(same(PROVIDER_URN, PROVIDER)),
    done(same(PROVIDER_URN, PROVIDER)),
    pre(replacement('create-replacement')),
    pre(net),
    done(net),
    done(replacement('create-replacement')),
    pre(replacement('replace')),
    done(replacement('replace')),
    pre(replacement('delete-replaced')),
    done(replacement('delete-replaced')),
    done(cache),
    summary({ same: 2, update: 1, replace: 1, delete: 1 }),
  ];
}

function secondUpdatePlan(): PulumiUpdatePlan {
  return parseUpdatePlan({
    manifest: { time: '2026-01-02T00:00:00Z', magic: 'abc', version: 'v3.200.0' },
    resourcePlans: {
      [STACK_URN]: { goal: { type: STACK, name: 'shop-dev', custom: false, protect: false }, steps: ['same'] },
      [PROVIDER_URN]: { goal: { type: PROVIDER, name: 'default', custom: true, protect: false }, steps: ['same'] },
      [NET_URN]: { goal: { type: NET, name: 'net', custom: true, protect: false, parent: STACK_URN }, steps: ['update'] },
      [DB_URN]: { goal: { type: DB, name: 'db', custom: true, protect: false, parent: STACK_URN, dependencies: [NET_URN] }, steps: ['create-replacement', 'replace', 'delete-replaced'] },
      [CACHE_URN]: { steps: ['delete'] },
    },
  });
}

describe('Pulumi ops onto plan steps', () => {
  it.each([
    ['create', 'create'],
    ['update', 'update'],
    ['same', 'same'],
    ['delete', 'delete'],
    ['replace', 'replace'],
    ['create-replacement', 'replace'],
    ['delete-replaced', 'replace'],
    ['import-replacement', 'replace'],
    ['remove-pending-replace', 'replace'],
    ['import', 'create'],
    ['read', 'same'],
    ['read-replacement', 'same'],
    ['refresh', 'same'],
    ['discard', 'delete'],
    ['discard-replaced', 'delete'],
  ] as const)('when pulumi reports %s, then the step is %s', (op, expected) => {
    expect(stepOpOf(op)).toBe(expected);
  });

  it('when one resource has a replacement in 3 steps, then it is one replace step', () => {
    expect(collapseOps(['create-replacement', 'replace', 'delete-replaced'])).toBe('replace');
    expect(collapseOps(['same', 'update'])).toBe('update');
    expect(collapseOps(['read', 'same'])).toBe('same');
    expect(collapseOps([])).toBe('same');
  });

  it('when pulumi reports an op this host does not know, then planning stops with IAC.UNSUPPORTED_STEP', () => {
    const error = thrown(() => collapseOps(['same', 'teleport'], NET_URN));
    expect(error.code).toBe('IAC.UNSUPPORTED_STEP');
    expect(error.details).toMatchObject({ op: 'teleport', urn: NET_URN });
  });

  it('when a change summary has a replacement in halves, then it counts once under replace', () => {
    expect(countsFromChangeSummary({ create: 2, 'create-replacement': 1, replace: 1, 'delete-replaced': 1, same: 3, read: 1, import: 1, discard: 1 })).toEqual({
      create: 3,
      update: 0,
      replace: 1,
      delete: 1,
      same: 4,
    });
  });

  it('when a URN names a resource, then its name is the last part (which may hold ::)', () => {
    expect(urnName(NET_URN)).toBe('net');
    expect(urnName('urn:pulumi:dev::shop::local:x:Y$local:x:Z::a::b')).toBe('a::b');
  });
});

describe('values from pulumi', () => {
  it('when a value holds secrets and unknowns, then secrets are [secret] and unknowns computed markers', () => {
    const value = {
      password: BLINDED_SECRET,
      nested: { keys: [ENCRYPTED_SECRET, { [PULUMI_SIG_KEY]: PULUMI_SECRET_SIG, plaintext: JSON.stringify(SECRET_VALUE) }] },
      id: PULUMI_UNKNOWN,
      size: 3,
      gone: undefined,
    };
    expect(maskValue(value)).toEqual({ password: '[secret]', nested: { keys: ['[secret]', '[secret]'] }, id: computed(PULUMI_UNKNOWN_EXPRESSION), size: 3 });
    expect(JSON.stringify(maskValue(value))).not.toContain(SECRET_VALUE);
  });

  it('when stack outputs are marked secret, then their values are [secret]', () => {
    expect(maskOutputs({ dbId: { value: 'db-2', secret: false }, connection: { value: `Password=${SECRET_VALUE}`, secret: true } })).toEqual({
      connection: '[secret]',
      dbId: 'db-2',
    });
  });

  it('when an output holds a secret the output map does not flag, then it is masked where the events mark it, or whole where it holds a resolved value', () => {
    const outputs = {
      database: { value: { host: 'db-2', password: SECRET_VALUE, replicas: [{ key: SECRET_VALUE }] }, secret: false },
      dsn: { value: `db://sa:${SECRET_VALUE}@db-2`, secret: false },
      dbId: { value: 'db-2', secret: false },
    };
    const shown = { database: { host: 'db-2', password: '[secret]', replicas: [{ key: '[secret]' }] }, dbId: 'db-2' };
    expect(maskOutputs(outputs, shown, [SECRET_VALUE])).toEqual({
      database: { host: 'db-2', password: '[secret]', replicas: [{ key: '[secret]' }] },
      dbId: 'db-2',
      dsn: '[secret]',
    });
  });

  it('when the plan file is wrapped with its version, then it reads the same', () => {
    const plan = { resourcePlans: { [NET_URN]: { goal: { type: NET, name: 'net', protect: false }, steps: ['create'] } } };
    expect(parseUpdatePlan({ version: 1, plan })).toEqual(parseUpdatePlan(plan));
    expect(thrown(() => parseUpdatePlan({ resourcePlans: { [NET_URN]: { steps: 'create' } } })).code).toBe('IAC.PULUMI_PLAN_UNREADABLE');
  });
});

describe('a preview as a plan', () => {
  it('when a first preview is recorded, then every resource is a create step in dependency order, shaped like a local plan', () => {
    const plan = planFromPreview(observation(firstPreview(), firstUpdatePlan(), { references: [{ secretRef: 'db-password' }] }));
    expect(planSchema.parse(plan)).toEqual(plan);
    expect(plan.steps.map((s) => `${s.op} ${s.name}`)).toEqual(['create default', 'create shop-dev', 'create net', 'create db']);
    expect(plan.counts).toEqual({ create: 4, update: 0, replace: 0, delete: 0, same: 0 });
    const db = plan.steps.find((s) => s.name === 'db');
    expect(db).toEqual({
      urn: DB_URN,
      name: 'db',
      type: DB,
      op: 'create',
      changedPaths: [],
      inputs: { network: computed(PULUMI_UNKNOWN_EXPRESSION), sku: 'basic', password: '[secret]' },
      dependencies: [NET_URN, STACK_URN],
      protect: true,
    });
    expect(plan.outputs).toEqual({ dbId: computed(PULUMI_UNKNOWN_EXPRESSION), netCidr: '10.0.0.0/16', connection: '[secret]' });
    expect(plan.references).toEqual([{ secretRef: 'db-password' }]);
    expect(plan.digest).toBe(planDigest({ schemaVersion: 1, project: 'shop', stack: 'dev', steps: plan.steps, outputs: plan.outputs }));
  });

  it('when the engine emits the same steps in another order, then the plan and its digest are the same', () => {
    const events = firstPreview();
    const reordered = [events[0]!, ...events.slice(1, -1).reverse(), events.at(-1)!].map((e, i) => ({ ...e, sequence: i }));
    expect(planFromPreview(observation(reordered, firstUpdatePlan()))).toEqual(planFromPreview(observation(events, firstUpdatePlan())));
  });

  it('when events are delivered out of their sequence, then they are read in sequence', () => {
    const events = firstPreview();
    const delivered = [...events].reverse();
    expect(planFromPreview(observation(delivered, firstUpdatePlan()))).toEqual(planFromPreview(observation(events, firstUpdatePlan())));
  });

  it('when a second preview updates, replaces and deletes, then each resource is one step with its changed paths, deletes last', () => {
    const plan = planFromPreview(observation(secondPreview(), secondUpdatePlan(), { baseSerial: 6 }));
    expect(plan.steps.map((s) => `${s.op} ${s.name}`)).toEqual(['same default', 'same shop-dev', 'update net', 'replace db', 'delete cache']);
    expect(plan.counts).toEqual({ create: 0, update: 1, replace: 1, delete: 1, same: 2 });
    expect(plan.baseSerial).toBe(6);
    const byName = new Map(plan.steps.map((s) => [s.name, s]));
    expect(byName.get('net')).toMatchObject({ id: 'net-1', changedPaths: ['tags.env'], inputs: netInputs('staging') });
    expect(byName.get('db')).toMatchObject({ id: 'db-1', changedPaths: ['sku'], inputs: { network: 'net-1', sku: 'premium', password: '[secret]' } });
    expect(byName.get('net')?.oldValues).toEqual({ 'tags.env': 'dev' });
    expect(byName.get('db')?.oldValues).toEqual({ sku: 'basic' });
    expect(byName.get('cache')).toEqual({ urn: CACHE_URN, name: 'cache', type: CACHE, op: 'delete', id: 'cache-1', changedPaths: [], dependencies: [], protect: false });
  });

  it('when a provider gives no detailed diff, then the changed top-level keys are the changed paths', () => {
    sequence = 0;
    const md = metadata('update', NET_URN, NET, { old: oldNet(), new: state(NET_URN, NET, { id: 'net-1', inputs: netInputs('qa') }), diffs: ['tags'] });
    const plan = planFromPreview(observation([pre(md), done(md)], parseUpdatePlan({ resourcePlans: { [NET_URN]: { steps: ['update'] } } })));
    expect(plan.steps[0]).toMatchObject({ op: 'update', changedPaths: ['tags'] });
  });

  it('when a resource changes type, then it is a replace that names its old type', () => {
    sequence = 0;
    const urn = 'urn:pulumi:dev::shop::local:network:VNet::net';
    const md = metadata('replace', urn, 'local:network:VNet', {
      old: state(urn, NET, { id: 'net-1', inputs: netInputs('dev') }),
      new: state(urn, 'local:network:VNet', { inputs: netInputs('dev') }),
    });
    const plan = planFromPreview(observation([pre(md)], parseUpdatePlan({ resourcePlans: { [urn]: { steps: ['create-replacement', 'replace', 'delete-replaced'] } } })));
    expect(plan.steps[0]).toMatchObject({ op: 'replace', type: 'local:network:VNet', oldType: NET, id: 'net-1' });
  });

  it('when the summary reports changes the events do not describe, then no plan is made (IAC.PULUMI_EVENTS_INCOMPLETE)', () => {
    const events = secondPreview().filter((e) => e.resourcePreEvent?.metadata.urn !== CACHE_URN && e.resOutputsEvent?.metadata.urn !== CACHE_URN);
    const plan = secondUpdatePlan();
    delete (plan.resourcePlans as Record<string, unknown>)[CACHE_URN];
    const error = thrown(() => planFromPreview(observation(events, plan)));
    expect(error.code).toBe('IAC.PULUMI_EVENTS_INCOMPLETE');
    expect(error.details).toMatchObject({ reported: { delete: 1 }, described: { delete: 0 } });
  });

  it('when the plan file has a resource the events missed, then it is still a step', () => {
    const events = firstPreview().filter((e) => e.resourcePreEvent?.metadata.urn !== NET_URN && e.resOutputsEvent?.metadata.urn !== NET_URN);
    const plan = planFromPreview(observation(events, firstUpdatePlan()));
    expect(plan.steps.find((s) => s.urn === NET_URN)).toMatchObject({ op: 'create', type: NET, name: 'net', inputs: {} });
  });

  it('when a plan is made, then no secret value or ciphertext is in it', () => {
    const text = JSON.stringify([planFromPreview(observation(firstPreview(), firstUpdatePlan())), planFromPreview(observation(secondPreview(), secondUpdatePlan()))]);
    expect(text).not.toContain('v1:');
    expect(text).not.toContain(PULUMI_SECRET_SIG);
    expect(text).not.toContain('c2VjcmV0');
  });
});

describe('the approved plan against the plan made again at apply', () => {
  const approved = (): Plan => planFromPreview(observation(secondPreview(), secondUpdatePlan()));
  const withStep = (plan: Plan, name: string, change: (step: Plan['steps'][number]) => Plan['steps'][number]): Plan => {
    const steps = plan.steps.map((s) => (s.name === name ? change(s) : s));
    return { ...plan, steps, digest: planDigest({ ...plan, steps }) };
  };

  it('when the plans are equal, then the approved plan covers it', () => {
    expect(planCovers(approved(), approved())).toEqual({ covered: true });
  });

  it('when only a secret-valued path no longer changes, then the approved plan covers it', () => {
    const plan = withStep(approved(), 'db', (s) => ({ ...s, op: 'update', changedPaths: ['password', 'sku'] }));
    const fresh = withStep(plan, 'db', (s) => ({ ...s, changedPaths: ['sku'] }));
    expect(planCovers(plan, fresh)).toEqual({ covered: true });
    // The old values of the paths it lost go with them.
    const withOld = withStep(plan, 'db', (s) => ({ ...s, oldValues: { password: '[secret]', sku: 'basic' } }));
    expect(planCovers(withOld, withStep(fresh, 'db', (s) => ({ ...s, oldValues: { sku: 'basic' } })))).toEqual({ covered: true });
    const unchanged = withStep(plan, 'db', (s) => ({ ...s, op: 'same', changedPaths: [] }));
    expect(planCovers(withStep(plan, 'db', (s) => ({ ...s, changedPaths: ['password'] })), unchanged)).toEqual({ covered: true });
  });

  it('when a path that is not secret no longer changes, then it is not covered', () => {
    const fresh = withStep(approved(), 'net', (s) => ({ ...s, op: 'same', changedPaths: [] }));
    expect(planCovers(approved(), fresh)).toMatchObject({ covered: false, reason: expect.stringContaining('tags.env') });
  });

  it('when the new plan changes another path, replaces instead of updating, or adds a resource, then it is not covered', () => {
    expect(planCovers(approved(), withStep(approved(), 'net', (s) => ({ ...s, changedPaths: ['cidr', 'tags.env'] })))).toMatchObject({ covered: false });
    expect(planCovers(approved(), withStep(approved(), 'net', (s) => ({ ...s, op: 'replace' })))).toMatchObject({ covered: false, reason: expect.stringContaining('replace instead of the approved update') });
    const added = approved();
    const extra = { ...added, steps: [...added.steps, { ...added.steps[2]!, urn: `${NET_URN}2`, name: 'net2' }] };
    expect(planCovers(added, { ...extra, digest: planDigest(extra) })).toMatchObject({ covered: false, reason: expect.stringContaining('was not in the approved plan') });
    const inputs = withStep(approved(), 'net', (s) => ({ ...s, inputs: netInputs('prod') }));
    expect(planCovers(approved(), inputs)).toMatchObject({ covered: false, reason: expect.stringContaining('differs') });
  });
});

describe('an up as an apply result', () => {
  const plan = () => planFromPreview(observation(secondPreview(), secondUpdatePlan(), { baseSerial: 6 }));
  const times = { startedAt: '2026-01-02T00:00:00.000Z', finishedAt: '2026-01-02T00:01:00.000Z' };
  const applyEvents = () =>
    secondPreview()
      .filter((e) => !e.summaryEvent)
      .map((e) => {
        const planning = { planning: false };
        if (e.resourcePreEvent) return { ...e, resourcePreEvent: { ...e.resourcePreEvent, ...planning } };
        if (e.resOutputsEvent) {
          const md = e.resOutputsEvent.metadata;
          // After the step the engine knows the new id.
          const created = md.urn === DB_URN && md.op !== 'delete-replaced' && md.new ? { ...md, new: { ...md.new, id: 'db-2' } } : md;
          return { ...e, resOutputsEvent: { metadata: created, ...planning } };
        }
        return e;
      });

  it('when up succeeds, then every resource succeeded (same ones unchanged) with its id, and outputs mask secrets', () => {
    const result = applyResultFromUp({
      plan: plan(),
      approvedDigest: plan().digest,
      events: [...applyEvents(), summary({ same: 2, update: 1, replace: 1, delete: 1 })],
      result: {
        outputs: { dbId: { value: 'db-2', secret: false }, connection: { value: `Password=${SECRET_VALUE}`, secret: true } },
        summary: { kind: 'update', startTime: new Date(), endTime: new Date(), message: '', environment: {}, config: {}, result: 'succeeded', version: 7 },
      },
      serial: 7,
      secrets: [SECRET_VALUE],
      ...times,
    });
    expect(result).toMatchObject({ status: 'applied', stack: 'dev', planDigest: plan().digest, serial: 7, outputs: { dbId: 'db-2', connection: '[secret]' }, ...times });
    expect(result.resources.map((r) => `${r.name} ${r.op} ${r.status} ${r.id ?? '-'}`)).toEqual([
      'default same unchanged -',
      'shop-dev same unchanged -',
      'net update succeeded net-1',
      'db replace succeeded db-2',
      'cache delete succeeded -',
    ]);
    expect(result.error).toBeUndefined();
    expect(JSON.stringify(result)).not.toContain(SECRET_VALUE);
  });

  it('when up succeeds with an object output holding a secret, then the receipt has [secret] there, as the events mark it, not the value the output map shows', () => {
    const stackOutputs = metadata('same', STACK_URN, STACK, {
      old: state(STACK_URN, STACK),
      new: state(STACK_URN, STACK, { outputs: { database: { host: 'db-2', password: BLINDED_SECRET } } }),
      provider: '',
    });
    const result = applyResultFromUp({
      plan: plan(),
      approvedDigest: plan().digest,
      events: [...applyEvents(), done(stackOutputs, false)],
      result: { outputs: { database: { value: { host: 'db-2', password: SECRET_VALUE }, secret: false } } },
      serial: 7,
      secrets: [],
      ...times,
    });
    expect(result.outputs).toEqual({ database: { host: 'db-2', password: '[secret]' } });
    expect(JSON.stringify(result)).not.toContain(SECRET_VALUE);
  });

  it("when up succeeds, then each resource's inputs are those its events show after the step (secrets masked), else the plan's; a deleted one has none", () => {
    const up = { outputs: {}, summary: { kind: 'update' as const, startTime: new Date(), endTime: new Date(), message: '', environment: {}, config: {}, result: 'succeeded' as const, version: 7 } };
    const withEvents = applyResultFromUp({ plan: plan(), approvedDigest: plan().digest, events: applyEvents(), result: up, serial: 7, secrets: [SECRET_VALUE], ...times });
    const inputsOf = (result: ReturnType<typeof applyResultFromUp>, name: string) => result.resources.find((r) => r.name === name)?.inputs;
    expect(inputsOf(withEvents, 'net')).toEqual(netInputs('staging'));
    expect(inputsOf(withEvents, 'db')).toEqual({ network: 'net-1', sku: 'premium', password: '[secret]' });
    expect(inputsOf(withEvents, 'cache')).toBeUndefined();

    const steps = plan().steps.map((st) => (st.name === 'db' ? { ...st, inputs: { ...st.inputs, network: computed(PULUMI_UNKNOWN_EXPRESSION) } } : st));
    const planned = { ...plan(), steps };
    const withoutDb = applyEvents().filter((e) => (e.resOutputsEvent?.metadata.urn ?? e.resourcePreEvent?.metadata.urn) !== DB_URN);
    const fallback = applyResultFromUp({ plan: planned, approvedDigest: planned.digest, events: withoutDb, result: up, serial: 7, secrets: [], ...times });
    expect(inputsOf(fallback, 'db')).toEqual({ network: computed(PULUMI_UNKNOWN_EXPRESSION), sku: 'premium', password: '[secret]' });
  });

  it('when a resource operation fails, then it is failed with the diagnostic (secrets redacted), the rest not reached skipped', () => {
    const events = applyEvents().filter((e) => {
      const urn = e.resOutputsEvent?.metadata.urn ?? e.resourcePreEvent?.metadata.urn;
      return urn !== CACHE_URN && !(urn === DB_URN && e.resOutputsEvent) && !(urn === DB_URN && e.resourcePreEvent?.metadata.op !== 'create-replacement');
    });
    const dbMd = metadata('create-replacement', DB_URN, DB, { old: oldDb(), new: state(DB_URN, DB, { inputs: dbInputs('net-1', 'premium') }) });
    const result = applyResultFromUp({
      plan: plan(),
      approvedDigest: 'sha256:approved',
      events: [
        ...events,
        diagnostic(`<{%reset%}>creating database: password ${SECRET_VALUE} rejected by policy<{%reset%}>\n`, DB_URN),
        failed(dbMd),
        diagnostic('update failed'),
      ],
      failure: 'error: update failed',
      serial: 7,
      secrets: [SECRET_VALUE],
      ...times,
    });
    expect(result.status).toBe('failed');
    expect(result.planDigest).toBe('sha256:approved');
    expect(result.outputs).toEqual({});
    expect(result.resources.map((r) => `${r.name} ${r.status}`)).toEqual(['default unchanged', 'shop-dev unchanged', 'net succeeded', 'db failed', 'cache skipped']);
    const db = result.resources.find((r) => r.name === 'db');
    expect(db).toMatchObject({ id: 'db-1', error: { code: 'PROVISIONING.APPLY_FAILED', message: 'creating database: password [secret] rejected by policy' } });
    expect(result.error).toEqual({ code: 'PROVISIONING.APPLY_FAILED', message: 'creating database: password [secret] rejected by policy' });
    expect(JSON.stringify(result)).not.toContain(SECRET_VALUE);
  });

  it('when pulumi stops the update because it goes beyond its plan, then the apply failed with PROVISIONING.PLAN_CHANGED', () => {
    const result = applyResultFromUp({
      plan: plan(),
      approvedDigest: plan().digest,
      events: [diagnostic(`<{%reset%}>resource ${NET_URN} violates plan: properties changed: +-cidr[{10.0.0.0/16}]<{%reset%}>\n`, NET_URN)],
      failure: 'error: update failed',
      serial: 6,
      secrets: [],
      ...times,
    });
    expect(result.error).toMatchObject({ code: 'PROVISIONING.PLAN_CHANGED', message: expect.stringContaining('violates plan') });
    expect(result.resources.every((r) => r.status === 'skipped')).toBe(true);
    for (const message of ['create is not allowed by the plan: no steps were expected for this resource', `expected resource operations for ${NET_URN} but none were seen`]) {
      const other = applyResultFromUp({ plan: plan(), approvedDigest: 'x', events: [diagnostic(message)], failure: 'failed', serial: 6, secrets: [], ...times });
      expect(other.error?.code).toBe('PROVISIONING.PLAN_CHANGED');
    }
  });

  it('when the caller stopped the update, then the apply failed with its code', () => {
    const result = applyResultFromUp({
      plan: plan(),
      approvedDigest: plan().digest,
      events: applyEvents().slice(0, 5),
      failure: 'error: update canceled',
      stopped: { code: 'PROVISIONING.STACK_LOCK_LOST', message: 'the stack lock was lost' },
      serial: 6,
      secrets: [],
      ...times,
    });
    expect(result.error).toEqual({ code: 'PROVISIONING.STACK_LOCK_LOST', message: 'the stack lock was lost' });
    expect(result.resources.map((r) => `${r.name} ${r.status}`)).toEqual(['default unchanged', 'shop-dev unchanged', 'net skipped', 'db skipped', 'cache skipped']);
  });
});
