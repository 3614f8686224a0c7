import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ConfigMap, EngineEvent, OpMap, OutputMap, PreviewResult, StepEventMetadata, UpdateSummary, UpResult } from '@pulumi/pulumi/automation';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AppError } from '../../shared/platform/errors/app-error';
import { pulumiIacRunner } from '../../shared/platform/iac/pulumi-runner';
import { pulumiSettingsOf } from '../../runner/state-backend';
import { backendOfTenant } from '../../shared/platform/config/targets';
import type { JsonValue, ValueReference } from '../../shared/platform/iac/iac-values';
import type { Plan } from '../../shared/platform/iac/plan';
import type { StackRef } from '../../shared/platform/iac/stack-ref';
import {
  PulumiCommandFailure,
  translateAutomationError,
  type PulumiAutomation,
  type PulumiStackHandle,
} from '../../shared/platform/iac/pulumi-automation';
import { PULUMI_SECRET_SIG, PULUMI_SIG_KEY, PULUMI_UNKNOWN } from '../../shared/platform/iac/pulumi-mapping';
import { createPulumiRunner, pulumiIgnorePath } from '../../shared/platform/iac/pulumi-runner';
import { ManualClock } from '../../shared/platform/time/clock';
import { parse as parseYaml } from 'yaml';
import { refusal } from '../support/refusal';

/*
 * The `pulumi` runner driven through its Automation API port by a TEST DOUBLE (`RecordedAutomation` below): it
 * runs no CLI and deploys nothing; it replays engine events recorded in the shapes of
 * `@pulumi/pulumi/automation`'s typed events and writes an update plan file where `pulumi preview --save-plan`
 * would. What it checks is the runner's own work: the project written to a work directory, references given as
 * secret config, the plan made from events, the check against the approved plan, `up` constrained to the saved
 * plan, the mapping of failures. The real Automation API and CLI are exercised only where this machine allows:
 * without a CLI (which cannot be installed here), where they must fail with PROVISIONING.RUNNER_UNAVAILABLE.
 * Its events are hand-written: the mapping they pass through is tested on Pulumi's published streams in
 * iac-pulumi-published.test.ts; the runner's own work above is in no published recording.
 */

/** The stack every call names: the runner selects it in the backend by its own name, `dev`. */
const DEV: StackRef = { tenant: 'tenant-a', project: 'shop', stack: 'dev' };
const STACK_URN = 'urn:pulumi:dev::shop::pulumi:pulumi:Stack::shop-dev';
const NET_URN = 'urn:pulumi:dev::shop::local:network:VirtualNetwork::net';
const DB_URN = 'urn:pulumi:dev::shop::local:sql:Database::db';
const SECRET_VALUE = 's3cr3t-db-password-value';
const BLINDED_SECRET = { [PULUMI_SIG_KEY]: PULUMI_SECRET_SIG, ciphertext: '[secret]' };

const FILES = {
  'Pulumi.yaml': 'name: shop\nruntime: yaml\nresources:\n  net:\n    type: local:network:VirtualNetwork\n  db:\n    type: local:sql:Database\n',
  'Pulumi.dev.yaml': 'config:\n  shop:dbPassword:\n    secretRef: db-password\n  region: west\n',
  'modules/README.md': 'nested files are written too\n',
};

let sequence = 0;
function event(body: Omit<EngineEvent, 'sequence' | 'timestamp'>): EngineEvent {
  return { sequence: sequence++, timestamp: 1767225600 + sequence, ...body };
}
function step(op: StepEventMetadata['op'], urn: string, type: string, inputs: Record<string, unknown>, id = '', old?: Record<string, unknown>): StepEventMetadata {
  const state = (values: Record<string, unknown>, stateId: string) => ({ urn, type, id: stateId, parent: STACK_URN, inputs: values, outputs: {}, provider: '' });
  return { op, urn, type, provider: '', new: state(inputs, id), ...(old ? { old: state(old, id || 'old-id') } : {}) };
}

/** A recorded preview: `create` everything (first preview) or update the network's cidr. */
function previewRecording(kind: 'first' | 'cidr' = 'first', planning = true): { events: EngineEvent[]; updatePlan: unknown; changeSummary: OpMap } {
  sequence = 0;
  const op = kind === 'first' ? 'create' : 'update';
  const net = kind === 'first' ? step('create', NET_URN, 'local:network:VirtualNetwork', { cidr: '10.0.0.0/16' }) : { ...step('update', NET_URN, 'local:network:VirtualNetwork', { cidr: '10.1.0.0/16' }, 'net-1', { cidr: '10.0.0.0/16' }), diffs: ['cidr'] };
  const db = step('create', DB_URN, 'local:sql:Database', { network: PULUMI_UNKNOWN, password: BLINDED_SECRET });
  const stack = step('create', STACK_URN, 'pulumi:pulumi:Stack', {});
  const stackOutputs = { ...stack, new: { ...stack.new!, outputs: { netId: PULUMI_UNKNOWN } } };
  return {
    events: [
      event({ resourcePreEvent: { metadata: stack, planning } }),
      event({ resourcePreEvent: { metadata: net, planning } }),
      event({ resOutputsEvent: { metadata: { ...net, new: { ...net.new!, id: 'net-1' } }, planning } }),
      event({ resourcePreEvent: { metadata: db, planning } }),
      event({ resOutputsEvent: { metadata: { ...db, new: { ...db.new!, id: 'db-1' } }, planning } }),
      event({ resOutputsEvent: { metadata: stackOutputs, planning } }),
      event({ summaryEvent: { maybeCorrupt: false, durationSeconds: 1, resourceChanges: { create: kind === 'first' ? 3 : 2, ...(kind === 'cidr' ? { update: 1 } : {}) }, policyPacks: {} } }),
    ],
    updatePlan: {
      manifest: { time: '2026-01-01T00:00:00Z', magic: 'm', version: 'v3.248.0' },
      config: { 'shop:dbPassword': { secure: 'v1:cipher' } },
      resourcePlans: {
        [STACK_URN]: { goal: { type: 'pulumi:pulumi:Stack', name: 'shop-dev', custom: false, protect: false }, steps: ['create'] },
        [NET_URN]: { goal: { type: 'local:network:VirtualNetwork', name: 'net', custom: true, protect: false, parent: STACK_URN }, steps: [op] },
        [DB_URN]: { goal: { type: 'local:sql:Database', name: 'db', custom: true, protect: false, parent: STACK_URN, dependencies: [NET_URN] }, steps: ['create'] },
      },
    },
    changeSummary: { create: kind === 'first' ? 3 : 2, ...(kind === 'cidr' ? { update: 1 } : {}) },
  };
}

function summaryOf(version: number, result: UpdateSummary['result'] = 'succeeded'): UpdateSummary {
  const at = new Date('2026-01-01T00:00:00Z');
  return { kind: 'update', startTime: at, endTime: at, message: '', environment: {}, config: {}, result, version };
}

interface PreviewScript {
  readonly events: readonly EngineEvent[];
  readonly updatePlan: unknown;
  readonly changeSummary: OpMap;
  readonly fails?: Error;
}
interface UpScript {
  readonly events: readonly EngineEvent[];
  readonly outputs?: OutputMap;
  readonly version?: number;
  readonly fails?: Error;
}

/**
 * TEST DOUBLE of the Pulumi Automation API (the `PulumiAutomation` port), not the real thing: it runs no CLI and
 * deploys nothing. Each `preview` replays the next recorded preview (events through `onEvent`, the update plan
 * written to the `plan` path); `up` replays the recorded update, one event per tick, and stops when its signal is
 * aborted. It records what the runner asked and what the work directory held.
 */
class RecordedAutomation implements PulumiAutomation {
  readonly calls: string[] = [];
  readonly configs: ConfigMap[] = [];
  /** The work directory's files when the stack was selected, by relative name. */
  readonly workDirs: Record<string, string>[] = [];
  readonly planFiles: string[] = [];
  /** `refresh` of each preview and up, as `preview:true`, `up:false`. */
  readonly refreshes: string[] = [];
  upPlanFile: string | undefined;
  upSignal: AbortSignal | undefined;
  selectFails: Error | undefined;

  constructor(
    private readonly previews: PreviewScript[],
    private readonly update: UpScript = { events: [] },
    private version: number | undefined = undefined,
  ) {}

  async selectStack({ stackName, workDir }: { stackName: string; workDir: string }): Promise<PulumiStackHandle> {
    this.calls.push(`select ${stackName}`);
    if (this.selectFails) throw this.selectFails;
    this.workDirs.push(await readTree(workDir));
    const recorded = this.previews;
    return {
      setAllConfig: async (config) => {
        this.calls.push('setAllConfig');
        this.configs.push(config);
      },
      info: async () => (this.version === undefined ? undefined : summaryOf(this.version)),
      preview: async ({ plan, onEvent, refresh }): Promise<PreviewResult> => {
        this.calls.push('preview');
        this.refreshes.push(`preview:${refresh === true}`);
        const script = recorded.shift();
        if (!script) throw new Error('no recorded preview left');
        for (const e of script.events) onEvent(e);
        if (script.fails) throw script.fails;
        await writeFile(plan, JSON.stringify(script.updatePlan));
        this.planFiles.push(plan);
        return { stdout: '', stderr: '', changeSummary: script.changeSummary };
      },
      up: async ({ plan, onEvent, signal, refresh }): Promise<UpResult> => {
        this.calls.push('up');
        this.refreshes.push(`up:${refresh === true}`);
        this.upPlanFile = await readFile(plan, 'utf8');
        this.upSignal = signal;
        for (const e of this.update.events) {
          if (signal.aborted) throw new PulumiCommandFailure('failed', 255, 'error: update canceled');
          onEvent(e);
          await new Promise((resolve) => setTimeout(resolve, 1));
        }
        if (signal.aborted) throw new PulumiCommandFailure('failed', 255, 'error: update canceled');
        if (this.update.fails) throw this.update.fails;
        this.version = this.update.version ?? (this.version ?? 0) + 1;
        return { stdout: '', stderr: '', outputs: this.update.outputs ?? {}, summary: summaryOf(this.version) };
      },
    };
  }
}

async function readTree(root: string, prefix = ''): Promise<Record<string, string>> {
  const files: Record<string, string> = {};
  for (const entry of await readdir(join(root, prefix), { withFileTypes: true })) {
    const name = prefix ? `${prefix}/${entry.name}` : entry.name;
    if (entry.isDirectory()) Object.assign(files, await readTree(root, name));
    else files[name] = await readFile(join(root, name), 'utf8');
  }
  return files;
}

/** The events of `up` for the first preview's resources, as the engine reports them when it carries them out. */
function upEvents(failDb = false): EngineEvent[] {
  return previewRecording('first', false)
    .events.filter((e) => !e.summaryEvent)
    .flatMap((e) => {
      const md = e.resOutputsEvent?.metadata;
      if (failDb && md?.urn === DB_URN) {
        return [
          event({ diagnosticEvent: { urn: DB_URN, message: `<{%reset%}>creating db: password ${SECRET_VALUE} is too weak<{%reset%}>\n`, color: 'raw', severity: 'error' } }),
          event({ resOpFailedEvent: { metadata: md, status: 1, steps: 0 } }),
        ];
      }
      if (failDb && md?.urn === STACK_URN) return [];
      return [e];
    });
}

const resolve = async (reference: ValueReference): Promise<JsonValue> => {
  if ('secretRef' in reference && reference.secretRef === 'db-password') return SECRET_VALUE;
  throw new AppError('PROVISIONING.REFERENCE_UNRESOLVED', 'unavailable', `no value for ${JSON.stringify(reference)}`);
};

let workRoot: string;
beforeEach(async () => {
  workRoot = await mkdtemp(join(tmpdir(), 'iac-pulumi-runner-'));
});
afterEach(async () => {
  await rm(workRoot, { recursive: true, force: true });
});

function runner(automation: PulumiAutomation) {
  return createPulumiRunner({ automation, workRoot, clock: new ManualClock('2026-01-01T00:00:00.000Z') });
}

describe('the pulumi runner without its CLI (real Automation API, real process calls)', () => {
  it('when the CLI is not installed, then version() fails with PROVISIONING.RUNNER_UNAVAILABLE', async () => {
    const error = await refusal(pulumiIacRunner({ cliRoot: join(workRoot, 'no-cli') }).version());
    expect(error).toMatchObject({ code: 'PROVISIONING.RUNNER_UNAVAILABLE', kind: 'unavailable', message: 'the pulumi CLI is not installed on this host' });
  });

  it('when the CLI answers, then version() is what `pulumi version` prints', async () => {
    // A stub executable standing in for the CLI's `version` command only.
    const root = join(workRoot, 'cli');
    await mkdir(join(root, 'bin'), { recursive: true });
    await writeFile(join(root, 'bin', 'pulumi'), '#!/bin/sh\necho v3.248.0\n');
    await chmod(join(root, 'bin', 'pulumi'), 0o755);
    await expect(pulumiIacRunner({ cliRoot: root }).version()).resolves.toBe('pulumi v3.248.0');
  });

  it('when the CLI is not installed, then preview through the real Automation API fails with PROVISIONING.RUNNER_UNAVAILABLE and leaves no work directory', async () => {
    const error = await refusal(pulumiIacRunner({ cliRoot: join(workRoot, 'no-cli'), workRoot }).preview(DEV, FILES));
    expect(error).toMatchObject({ code: 'PROVISIONING.RUNNER_UNAVAILABLE', kind: 'unavailable' });
    expect(await readdir(workRoot)).toEqual([]);
  });

  it('when the CLI is not installed, then apply through the real Automation API fails with a receipt, nothing applied', async () => {
    const automation = new RecordedAutomation([previewRecording()]);
    const plan = await runner(automation).preview(DEV, FILES);
    const result = await pulumiIacRunner({ cliRoot: join(workRoot, 'no-cli'), workRoot }).apply(DEV, FILES, {}, plan, resolve);
    expect(result).toMatchObject({ status: 'failed', planDigest: plan.digest, error: { code: 'PROVISIONING.RUNNER_UNAVAILABLE' } });
    expect(result.resources.every((r) => r.status === 'skipped')).toBe(true);
  });

  it('when the Automation API throws its command errors, then they become the port failures', () => {
    // The Automation API's own error factory (internal to the package, reached at run time).
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { createCommandError } = require('@pulumi/pulumi/automation/errors') as { createCommandError: (result: unknown) => Error };
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { CommandResult } = require('@pulumi/pulumi/automation/cmd') as { CommandResult: new (stdout: string, stderr: string, code: number, err?: Error) => unknown };
    const missing = Object.assign(new Error('Command failed with ENOENT: pulumi version'), { code: 'ENOENT' });
    expect(translateAutomationError(createCommandError(new CommandResult('', '', -2, missing)))).toMatchObject({ code: 'PROVISIONING.RUNNER_UNAVAILABLE' });
    const busy = translateAutomationError(createCommandError(new CommandResult('', 'error: [409] Conflict: Another update is currently in progress.', 255)));
    expect(busy).toBeInstanceOf(PulumiCommandFailure);
    expect(busy).toMatchObject({ reason: 'concurrent-update', exitCode: 255 });
    expect(translateAutomationError(createCommandError(new CommandResult('', 'error: program failed', 1)))).toMatchObject({ reason: 'failed', exitCode: 1 });
    const other = new TypeError('not a command');
    expect(translateAutomationError(other)).toBe(other);
  });
});

describe('preview through the Automation API port', () => {
  it('when a project is previewed, then its files are written to a work directory, references set as secret placeholders, and the plan made from the events', async () => {
    const automation = new RecordedAutomation([previewRecording()], undefined, 4);
    const plan = await runner(automation).preview(DEV, FILES, { replicas: 2 });

    expect(automation.calls).toEqual(['select dev', 'setAllConfig', 'preview']);
    const written = automation.workDirs[0]!;
    expect(written['Pulumi.yaml']).toBe(FILES['Pulumi.yaml']);
    expect(written['modules/README.md']).toBe(FILES['modules/README.md']);
    expect(written['Pulumi.dev.yaml']).toBe('config:\n  shop:region: west\n  shop:replicas: 2\n');
    expect(automation.configs).toEqual([{ 'shop:dbPassword': { value: 'unresolved:secretRef:db-password', secret: true } }]);

    expect(plan).toMatchObject({ schemaVersion: 1, project: 'shop', stack: 'dev', baseSerial: 4, counts: { create: 3, update: 0, replace: 0, delete: 0, same: 0 } });
    expect(plan.steps.map((s) => `${s.op} ${s.name}`)).toEqual(['create shop-dev', 'create net', 'create db']);
    expect(plan.steps[2]!.inputs).toMatchObject({ password: '[secret]' });
    expect(plan.references).toEqual([{ secretRef: 'db-password' }]);
    expect(plan.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(await readdir(workRoot)).toEqual([]);
  });

  it('when the program fails in preview, then the plan error is IAC.PREVIEW_FAILED with the diagnostic', async () => {
    const failing = {
      ...previewRecording(),
      events: [event({ diagnosticEvent: { message: '<{%reset%}>Pulumi.yaml: resource db: unknown property "sizeGb"<{%reset%}>\n', color: 'raw', severity: 'error' } })],
      fails: new PulumiCommandFailure('failed', 255, 'error: preview failed'),
    };
    const error = await refusal(runner(new RecordedAutomation([failing])).preview(DEV, FILES));
    expect(error).toMatchObject({ code: 'IAC.PREVIEW_FAILED', kind: 'unprocessable', message: 'Pulumi.yaml: resource db: unknown property "sizeGb"' });
  });

  it('when another update holds the stack, then preview fails with PROVISIONING.STACK_BUSY (retryable)', async () => {
    const automation = new RecordedAutomation([]);
    automation.selectFails = new PulumiCommandFailure('concurrent-update', 255, 'error: [409] Conflict');
    expect(await refusal(runner(automation).preview(DEV, FILES))).toMatchObject({ code: 'PROVISIONING.STACK_BUSY', kind: 'unavailable' });
  });

  it('when the backend cannot be reached, then preview fails with PROVISIONING.RUNNER_UNAVAILABLE saying why', async () => {
    const automation = new RecordedAutomation([]);
    automation.selectFails = new PulumiCommandFailure('failed', 255, 'warning: x\nerror: PULUMI_ACCESS_TOKEN must be set for login during non-interactive CLI sessions\n');
    const error = await refusal(runner(automation).preview(DEV, FILES));
    expect(error).toMatchObject({ code: 'PROVISIONING.RUNNER_UNAVAILABLE', message: expect.stringContaining('PULUMI_ACCESS_TOKEN must be set') });
  });

  it('when a project file would land outside the work directory, or a reference is nested in a value, then nothing runs', async () => {
    const automation = new RecordedAutomation([previewRecording()]);
    expect(await refusal(runner(automation).preview(DEV, { ...FILES, '../escape.yaml': 'x' }))).toMatchObject({ code: 'IAC.INVALID_PROJECT' });
    expect(await refusal(runner(automation).preview(DEV, FILES, { settings: { password: { secretRef: 'x' } } }))).toMatchObject({ code: 'IAC.INVALID_CONFIG' });
    expect(await refusal(runner(automation).preview(DEV, { 'Pulumi.dev.yaml': 'config: {}\n' }))).toMatchObject({ code: 'IAC.INVALID_PROJECT' });
    expect(automation.calls).toEqual([]);
  });
});

describe('apply through the Automation API port', () => {
  async function approved(): Promise<Plan> {
    return runner(new RecordedAutomation([previewRecording()], undefined, 4)).preview(DEV, FILES);
  }

  it('when the plan is unchanged, then up runs constrained to the update plan just saved, with the secret resolved, and the receipt holds no secret', async () => {
    const plan = await approved();
    const automation = new RecordedAutomation(
      [previewRecording()],
      { events: upEvents(), outputs: { netId: { value: 'net-1', secret: false }, dsn: { value: `db://u:${SECRET_VALUE}@db-1`, secret: true } }, version: 5 },
      4,
    );
    const result = await runner(automation).apply(DEV, FILES, {}, plan, resolve);

    expect(automation.calls).toEqual(['select dev', 'setAllConfig', 'preview', 'up']);
    expect(automation.configs).toEqual([{ 'shop:dbPassword': { value: SECRET_VALUE, secret: true } }]);
    expect(automation.upPlanFile).toBe(JSON.stringify(previewRecording().updatePlan));
    expect(result).toMatchObject({ status: 'applied', stack: 'dev', planDigest: plan.digest, serial: 5, outputs: { netId: 'net-1', dsn: '[secret]' } });
    expect(result.resources.map((r) => `${r.op} ${r.name} ${r.status} ${r.id ?? '-'}`)).toEqual(['create shop-dev succeeded -', 'create net succeeded net-1', 'create db succeeded db-1']);
    expect(JSON.stringify(result)).not.toContain(SECRET_VALUE);
    expect(await readdir(workRoot)).toEqual([]);
  });

  /** A recorded first preview whose saved update plan says when it was saved (`manifest.time`). */
  const savedAt = (time: string) => {
    const recording = previewRecording();
    return { ...recording, updatePlan: { ...(recording.updatePlan as Record<string, unknown>), manifest: { time, magic: 'm', version: 'v3.248.0' } } };
  };

  it('when the approved plan has no references, then its update plan (saved by the plan job) is what up runs constrained to, not the one saved again at apply', async () => {
    const plain = { ...FILES, 'Pulumi.dev.yaml': 'config:\n  region: west\n' };
    const plan = await runner(new RecordedAutomation([savedAt('at-plan')], undefined, 4)).preview(DEV, plain);
    const automation = new RecordedAutomation([savedAt('at-apply')], { events: upEvents(), version: 5 }, 4);

    const result = await runner(automation).apply(DEV, plain, {}, plan, resolve);

    expect(plan.references).toEqual([]);
    expect(plan.updatePlan).toEqual(savedAt('at-plan').updatePlan);
    expect(automation.calls).toEqual(['select dev', 'preview', 'up']);
    expect(JSON.parse(automation.upPlanFile ?? '')).toEqual(savedAt('at-plan').updatePlan);
    expect(result).toMatchObject({ status: 'applied', planDigest: plan.digest });
    expect(await readdir(workRoot)).toEqual([]);
  });

  it('when the approved plan has references, then up runs constrained to the update plan saved at apply (it binds the resolved secrets), which planCovers bound to the approved plan', async () => {
    const plan = await runner(new RecordedAutomation([savedAt('at-plan')], undefined, 4)).preview(DEV, FILES);
    const automation = new RecordedAutomation([savedAt('at-apply')], { events: upEvents(), version: 5 }, 4);

    const result = await runner(automation).apply(DEV, FILES, {}, plan, resolve);

    expect(plan.references).toEqual([{ secretRef: 'db-password' }]);
    expect(JSON.parse(automation.upPlanFile ?? '')).toEqual(savedAt('at-apply').updatePlan);
    expect(result.status).toBe('applied');
  });

  it('when the plan made again does something the approved one did not, then PROVISIONING.PLAN_CHANGED and up never runs', async () => {
    const plan = await approved();
    const automation = new RecordedAutomation([previewRecording('cidr')], { events: upEvents() }, 4);
    const result = await runner(automation).apply(DEV, FILES, {}, plan, resolve);
    expect(automation.calls).not.toContain('up');
    expect(result).toMatchObject({ status: 'failed', planDigest: plan.digest, error: { code: 'PROVISIONING.PLAN_CHANGED' } });
    expect(result.error?.message).toContain(NET_URN);
    expect(result.resources.every((r) => r.status === 'skipped')).toBe(true);
  });

  it('when pulumi refuses an operation beyond the update plan, then PROVISIONING.PLAN_CHANGED', async () => {
    const plan = await approved();
    const violation = event({ diagnosticEvent: { urn: NET_URN, message: `resource ${NET_URN} violates plan: properties changed: ~~cidr[{10.0.0.0/16}!={10.2.0.0/16}]`, color: 'raw', severity: 'error' } });
    const automation = new RecordedAutomation([previewRecording()], { events: [violation], fails: new PulumiCommandFailure('failed', 255, 'error: update failed') }, 4);
    const result = await runner(automation).apply(DEV, FILES, {}, plan, resolve);
    expect(automation.calls).toContain('up');
    expect(result).toMatchObject({ status: 'failed', serial: 4, error: { code: 'PROVISIONING.PLAN_CHANGED' } });
  });

  it('when a resource fails during up, then it is failed with its redacted diagnostic and the apply failed', async () => {
    const plan = await approved();
    const automation = new RecordedAutomation([previewRecording()], { events: upEvents(true), fails: new PulumiCommandFailure('failed', 255, `error: update failed: ${SECRET_VALUE}`) }, 4);
    const result = await runner(automation).apply(DEV, FILES, {}, plan, resolve);
    expect(result.status).toBe('failed');
    expect(result.resources.map((r) => `${r.name} ${r.status}`)).toEqual(['shop-dev skipped', 'net succeeded', 'db failed']);
    expect(result.error).toEqual({ code: 'PROVISIONING.APPLY_FAILED', message: 'creating db: password [secret] is too weak' });
    expect(JSON.stringify(result)).not.toContain(SECRET_VALUE);
  });

  it('when a reference cannot be resolved, then PROVISIONING.REFERENCE_UNRESOLVED before pulumi is asked anything', async () => {
    const plan = await approved();
    const automation = new RecordedAutomation([previewRecording()], { events: upEvents() });
    const result = await runner(automation).apply(DEV, FILES, { apiKey: { secretRef: 'missing' } }, plan, resolve);
    expect(result.error?.code).toBe('PROVISIONING.REFERENCE_UNRESOLVED');
    expect(automation.calls).toEqual([]);
  });

  it('when the caller refuses before up, then nothing is applied; when it refuses during up, then the update is cancelled with its code', async () => {
    const plan = await approved();
    const lockLost = () => Promise.reject(new AppError('PROVISIONING.STACK_LOCK_LOST', 'conflict', 'the stack lock was lost'));

    const before = new RecordedAutomation([previewRecording()], { events: upEvents() }, 4);
    const refused = await runner(before).apply(DEV, FILES, {}, plan, resolve, { beforeStep: lockLost });
    expect(before.calls).not.toContain('up');
    expect(refused).toMatchObject({ status: 'failed', error: { code: 'PROVISIONING.STACK_LOCK_LOST' } });

    let checks = 0;
    const during = new RecordedAutomation([previewRecording()], { events: upEvents() }, 4);
    const cancelled = await runner(during).apply(DEV, FILES, {}, plan, resolve, { beforeStep: () => (++checks > 1 ? lockLost() : Promise.resolve()) });
    expect(during.upSignal?.aborted).toBe(true);
    expect(cancelled).toMatchObject({ status: 'failed', error: { code: 'PROVISIONING.STACK_LOCK_LOST' } });
    expect(cancelled.resources.some((r) => r.status === 'skipped')).toBe(true);
  });

  it('when the approved plan is not a plan, then apply refuses with IAC.INVALID_PLAN', async () => {
    const error = await refusal(runner(new RecordedAutomation([])).apply(DEV, FILES, {}, { digest: 'x' } as unknown as Plan, resolve));
    expect(error.code).toBe('IAC.INVALID_PLAN');
  });
});

describe('plan options through the Automation API port', () => {
  const HELD = [
    { scope: { type: 'local:network:VirtualNetwork' }, path: 'tags.*' },
    { scope: { urn: DB_URN }, path: 'rules.0.port' },
    { scope: { urn: 'urn:pulumi:prod::shop::local:sql:Database::db' }, path: 'sku' },
  ];

  it('when refresh is asked, then preview and up run with refresh; without it, neither does', async () => {
    const plan = await runner(new RecordedAutomation([previewRecording()], undefined, 4)).preview(DEV, FILES, {}, { refresh: true });
    const refreshing = new RecordedAutomation([previewRecording(), previewRecording()], { events: upEvents(), version: 5 }, 4);
    await runner(refreshing).preview(DEV, FILES, {}, { refresh: true });
    const result = await runner(refreshing).apply(DEV, FILES, {}, plan, resolve, { refresh: true });
    expect(result.status).toBe('applied');
    expect(refreshing.refreshes).toEqual(['preview:true', 'preview:true', 'up:true']);

    const plain = new RecordedAutomation([previewRecording()], { events: upEvents(), version: 5 }, 4);
    await runner(plain).apply(DEV, FILES, {}, plan, resolve);
    expect(plain.refreshes).toEqual(['preview:false', 'up:false']);
  });

  it('when ignore rules are given, then the project is written with them in the ignoreChanges of the resources they match, in preview and apply', async () => {
    const files = { ...FILES, 'Pulumi.yaml': FILES['Pulumi.yaml'] + '    options:\n      ignoreChanges: [size]\n' };
    const automation = new RecordedAutomation([previewRecording(), previewRecording()], { events: upEvents(), version: 5 }, 4);
    const plan = await runner(automation).preview(DEV, files, {}, { ignore: HELD });
    await runner(automation).apply(DEV, files, {}, plan, resolve, { ignore: HELD });

    for (const written of automation.workDirs) {
      const project = parseYaml(written['Pulumi.yaml']!) as { resources: Record<string, { options?: { ignoreChanges?: string[] } }> };
      expect(project.resources.net?.options?.ignoreChanges).toEqual(['tags']);
      // The rule for the same name in another stack matches nothing here; the project's own entries stay.
      expect(project.resources.db?.options?.ignoreChanges).toEqual(['size', 'rules[0].port']);
    }
    // Without rules the project file is written as it is.
    const plain = new RecordedAutomation([previewRecording()], undefined, 4);
    await runner(plain).preview(DEV, files, {}, { ignore: [] });
    expect(plain.workDirs[0]?.['Pulumi.yaml']).toBe(files['Pulumi.yaml']);
  });

  it('when an ignore rule path cannot be read, then nothing runs and preview fails with IAC.INVALID_IGNORE_RULE', async () => {
    const automation = new RecordedAutomation([previewRecording()]);
    const error = await refusal(runner(automation).preview(DEV, FILES, {}, { ignore: [{ scope: { urn: DB_URN }, path: '*.port' }] }));
    expect(error).toMatchObject({ code: 'IAC.INVALID_IGNORE_RULE', kind: 'validation' });
    expect(automation.calls).toEqual([]);
  });

  it.each([
    ['sku.capacity', 'sku.capacity'],
    ['tags.*', 'tags'],
    ['*', '*'],
    ['rules.1.port', 'rules[1].port'],
    ['labels.app-name', 'labels.app-name'],
    ['labels.a:b', 'labels["a:b"]'],
  ])('when the held path is %s, then Pulumi is given %s', (path, expected) => {
    expect(pulumiIgnorePath(path)).toBe(expected);
  });
});

describe("the pulumi runner's per-tenant state backend and secrets provider (real Automation API, a CLI stub that records its calls)", () => {
  it('when a job of a tenant opens its stack, then the CLI is called with that tenant\'s backend and its stack is created with that tenant\'s Key Vault key', async () => {
    // Arrange: a stand-in for the CLI (it cannot be installed here) that records each call; `stack select` answers
    // as the CLI does for a stack that does not exist yet, so the Automation API creates it.
    const root = join(workRoot, 'cli');
    const calls = join(workRoot, 'calls.log');
    await mkdir(join(root, 'bin'), { recursive: true });
    await writeFile(
      join(root, 'bin', 'pulumi'),
      [
        '#!/bin/sh',
        `echo "$PULUMI_BACKEND_URL | $*" >> '${calls}'`,
        'case "$*" in',
        '  version*) echo v3.210.0 ;;',
        "  *'stack select'*) echo \"error: no stack named 'development' found\" >&2; exit 255 ;;",
        '  *) exit 1 ;;',
        'esac',
        '',
      ].join('\n'),
    );
    await chmod(join(root, 'bin', 'pulumi'), 0o755);
    const backend = backendOfTenant({ url: 'azblob://state-{tenant}', secretsProvider: 'azurekeyvault://kv-{tenant}.vault.azure.net/keys/pulumi' }, 'demo-team');

    // Act: the stack's creation is answered with a failure after `stack init`, so the preview stops there.
    await refusal(pulumiIacRunner({ cliRoot: root, workRoot, ...pulumiSettingsOf(backend) }).preview(DEV, FILES));

    // Assert
    const logged = (await readFile(calls, 'utf8')).trim().split('\n');
    const init = logged.find((line) => line.includes('stack init'));
    expect(init).toContain('azblob://state-demo-team | ');
    expect(init).toContain('--secrets-provider azurekeyvault://kv-demo-team.vault.azure.net/keys/pulumi');
    expect(logged.filter((line) => line.includes(' stack ')).every((line) => line.startsWith('azblob://state-demo-team | '))).toBe(true);
  });

  it('when a job runs the CLI, then automatic plugin acquisition is off for every call, whatever the environment given says', async () => {
    // Arrange: a stand-in CLI that records the setting with each call.
    const root = join(workRoot, 'cli');
    const calls = join(workRoot, 'calls.log');
    await mkdir(join(root, 'bin'), { recursive: true });
    await writeFile(
      join(root, 'bin', 'pulumi'),
      ['#!/bin/sh', `echo "$PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION | $*" >> '${calls}'`, 'case "$*" in', '  version*) echo v3.210.0 ;;', '  *) exit 1 ;;', 'esac', ''].join('\n'),
    );
    await chmod(join(root, 'bin', 'pulumi'), 0o755);

    // Act
    await refusal(pulumiIacRunner({ cliRoot: root, workRoot, envVars: { PULUMI_BACKEND_URL: 'azblob://state-demo-team', PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION: 'false' } }).preview(DEV, FILES));

    // Assert
    const logged = (await readFile(calls, 'utf8')).trim().split('\n');
    expect(logged.filter((line) => line.includes(' stack ')).length).toBeGreaterThan(0);
    expect(logged.filter((line) => !line.includes('version')).every((line) => line.startsWith('true | '))).toBe(true);
  });
});
