import type { InvocationContexts } from '../functions-core/invocation-contexts';
import type { InvocationContext, Timer } from '@azure/functions';
import { Cron } from 'croner';
import { randomUUID } from 'node:crypto';
import { ensureError } from '../../shared/platform/errors/app-error';
import { faultLevel } from '../../shared/platform/sql/transaction';
import { triggerOf, type Registration } from '../functions-core/registry';
import type { HostComponent, HostContext } from '../host';
import type { LogHandler } from '../http/http-binding';

export interface TimerBindingOptions {
  /**
   * An invocation later than its scheduled occurrence by more than this is past due (`timer.isPastDue`).
   * Example: `1000`.
   */
  readonly pastDueMarginMs?: number;
}

/**
 * Binds `timerTrigger` functions: NCRONTAB schedules with seconds (`{second} {minute} {hour} {day} {month}
 * {day-of-week}`, UTC, as the Functions host reads them), `runOnStartup`, `isPastDue`. One timer never overlaps
 * itself: the next occurrence is armed only after the running invocation settles, and occurrences missed meanwhile
 * collapse into one past-due invocation (`isPastDue: true`), as in Azure.
 */
export class TimerBinding implements HostComponent {
  readonly name = 'timers';
  readonly #options: TimerBindingOptions;
  #timers: ScheduledTimer[] = [];

  constructor(options: TimerBindingOptions = {}) {
    this.#options = options;
  }

  start(context: HostContext): Promise<void> {
    for (const registration of context.functionsWithTrigger('timerTrigger')) {
      let timer: ScheduledTimer;
      try {
        timer = new ScheduledTimer(registration, context.log, context.invocations, this.#options.pastDueMarginMs ?? 1000);
      } catch (thrown) {
        // As the Functions host does with a function it cannot index: report it, keep the others running.
        context.log('error', registration.metadata.name, 'timer not bound', ensureError(thrown));
        continue;
      }
      this.#timers.push(timer);
    }
    return Promise.resolve();
  }

  /** Timers fire once the host listens: a function's durable client carries the host's URL. */
  listening(): Promise<void> {
    for (const timer of this.#timers) timer.start();
    return Promise.resolve();
  }

  /** Disarms every timer and waits for running invocations. */
  async stop(): Promise<void> {
    await Promise.all(this.#timers.map((t) => t.stop()));
    this.#timers = [];
  }
}

type TimerHandler = (timer: Timer, context: InvocationContext) => unknown;

const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/** A 6-field NCRONTAB expression, or a TimeSpan `hh:mm:ss` (the Functions host accepts both). */
export function parseSchedule(schedule: string): { nextAfter(after: Date): Date | null } {
  const span = /^(\d+):(\d{2}):(\d{2})$/.exec(schedule.trim());
  if (span) {
    const ms = (Number(span[1]) * 3600 + Number(span[2]) * 60 + Number(span[3])) * 1000;
    if (ms <= 0) throw new Error(`timer schedule ${schedule} must be longer than zero`);
    return { nextAfter: (after) => new Date(after.getTime() + ms) };
  }
  const cron = new Cron(schedule.trim(), { paused: true, timezone: 'Etc/UTC', mode: '6-part' });
  return { nextAfter: (after) => cron.nextRun(after) };
}

class ScheduledTimer {
  readonly #registration: Registration;
  readonly #invocations: InvocationContexts;
  readonly #trigger: ReturnType<typeof triggerOf>;
  readonly #schedule: ReturnType<typeof parseSchedule>;
  readonly #log: LogHandler;
  readonly #marginMs: number;
  #handle: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #stopped = false;
  #last: Date;

  constructor(registration: Registration, log: LogHandler, invocations: InvocationContexts, marginMs: number) {
    this.#registration = registration;
    this.#invocations = invocations;
    this.#trigger = triggerOf(registration);
    const schedule = this.#trigger.schedule;
    if (typeof schedule !== 'string') throw new Error(`timer ${registration.metadata.name} has no schedule`);
    this.#schedule = parseSchedule(schedule);
    this.#log = log;
    this.#marginMs = marginMs;
    this.#last = new Date();
  }

  get name(): string {
    return this.#registration.metadata.name;
  }

  start(): void {
    const now = new Date();
    if (this.#trigger.runOnStartup === true) this.#fire(now, false);
    else this.#arm(now);
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#handle);
    await this.#running;
  }

  /**
   * Arms the first occurrence after `after`. When a run overran, that occurrence is already gone: it fires at once,
   * past due, and the next one is armed from the present, so every occurrence missed meanwhile collapses into it.
   */
  #arm(after: Date): void {
    if (this.#stopped) return;
    const scheduled = this.#schedule.nextAfter(after);
    if (scheduled) this.#armAt(scheduled);
  }

  #armAt(scheduled: Date): void {
    if (this.#stopped) return;
    const wait = scheduled.getTime() - Date.now();
    // Node fires a timeout above 2^31-1 ms (about 24.8 days) at once: wait in steps for schedules further away.
    if (wait > MAX_TIMEOUT_MS) {
      this.#handle = setTimeout(() => this.#armAt(scheduled), MAX_TIMEOUT_MS);
      return;
    }
    this.#handle = setTimeout(() => {
      const late = Date.now() - scheduled.getTime();
      this.#fire(scheduled, late > this.#marginMs);
    }, Math.max(0, wait));
  }

  #fire(scheduled: Date, isPastDue: boolean): void {
    if (this.#stopped) return;
    const next = this.#schedule.nextAfter(scheduled);
    const timer: Timer = {
      isPastDue,
      schedule: { adjustForDST: true },
      scheduleStatus: {
        last: this.#last.toISOString(),
        next: (next ?? scheduled).toISOString(),
        lastUpdated: new Date().toISOString(),
      },
    };
    this.#last = scheduled;
    const run = this.#invoke(timer).finally(() => {
      this.#running = undefined;
      this.#arm(isPastDue ? new Date() : scheduled);
    });
    this.#running = run;
  }

  async #invoke(timer: Timer): Promise<void> {
    const name = this.name;
    const context = this.#invocations.create(this.#registration, {
      invocationId: randomUUID(),
      logHandler: (level, ...args) => this.#log(level, name, ...args),
    });
    try {
      await (this.#registration.callback as unknown as TimerHandler)(timer, context);
    } catch (thrown) {
      // As in Azure, a failed tick is logged and the schedule goes on.
      this.#log(faultLevel(ensureError(thrown)), name, `timer invocation failed`, ensureError(thrown));
    }
  }
}
