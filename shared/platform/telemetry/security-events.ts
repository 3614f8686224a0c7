import { logLine } from '../logging/log';
import { recordAgentReportRefused } from './metrics';

/**
 * Security events: what the host refused to believe of a runner agent (a plan of another stack, a digest that is
 * not its plan's, an apply result that is not the approved plan carried out). Each is one warning log line whose
 * message starts `security:`, with the tenant, run, job, pool and agent, and counts in
 * `provisioning.agent_reports_refused` (by code): an agent that reports so is broken or forged, and its pool's
 * credential is what to look at.
 */
export interface SecurityEvent {
  /** `PROVISIONING.APPLY_DIVERGED`, `PROVISIONING.PLAN_NOT_OF_JOB`, `RUNNER.PLAN_SUMMARY_IGNORED`. */
  readonly code: string;
  /** What the agent reported and why it was not believed. */
  readonly reason: string;
  readonly tenant: string;
  readonly runId: string;
  readonly jobId: string;
  readonly pool: string;
  readonly agent?: string;
}

/** Where security event lines go. Default: the process's stderr (Application Insights keeps a worker's stderr in Azure). */
export type SecurityLog = (line: string) => void;

export const stderrSecurityLog: SecurityLog = (line) => {
  process.stderr.write(`${line}\n`);
};

/** Logs `event` as one JSON line (`security: <reason>`) and counts it. */
export function securityEvent(log: SecurityLog, event: SecurityEvent, at: Date): void {
  const { reason, ...ids } = event;
  log(logLine({ level: 'warning', message: `security: ${reason}`, ...ids }, at));
  recordAgentReportRefused(event.code);
}
