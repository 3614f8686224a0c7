import { metrics } from '@opentelemetry/api';
import type { PrometheusSerializer } from '@opentelemetry/exporter-prometheus';
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { AppError } from '../errors/app-error';
import { defineInstruments } from './metrics';

/**
 * The process's MeterProvider (issue 10, telemetry). With an Application Insights connection string,
 * `applicationinsights` v3 (Azure Monitor over OpenTelemetry) sets it up and exports to Azure Monitor; without one
 * nothing is sent anywhere, and an SDK MeterProvider keeps the values in process. Either way the values can be read
 * in Prometheus text format (GET /runtime-cloud/metrics).
 *
 * This module loads the OpenTelemetry SDK; it is loaded by the composition root on the first invocation, never when
 * the functions register (cold start). `applicationinsights` is loaded only when the connection string is set.
 */
export interface TelemetryOptions {
  /** `APPLICATIONINSIGHTS_CONNECTION_STRING`; empty: nothing is exported. Example: `InstrumentationKey=…;IngestionEndpoint=https://…/`. */
  readonly connectionString: string;
}

export interface Telemetry {
  /** Where the metrics go besides GET /runtime-cloud/metrics: Azure Monitor, or nowhere. */
  readonly exporter: 'azure-monitor' | 'none';
  /** The current values, in Prometheus text format 0.0.4. */
  prometheusText(): Promise<string>;
}

/** A reader that only answers when asked (the pull side of GET /runtime-cloud/metrics). */
class PullReader extends MetricReader {
  protected override onShutdown(): Promise<void> {
    return Promise.resolve();
  }
  protected override onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
}

let started: Promise<Telemetry> | undefined;

/**
 * Starts the process's metrics once; later calls (a second host in the same process) answer the first one's, so
 * the first configuration wins. A failure (an Application Insights setup that throws) is not kept: the next call
 * tries again.
 */
export function startTelemetry(options: TelemetryOptions): Promise<Telemetry> {
  if (!started) {
    const starting = start(options);
    starting.catch(() => {
      if (started === starting) started = undefined;
    });
    started = starting;
  }
  return started;
}

async function start(options: TelemetryOptions): Promise<Telemetry> {
  const reader = new PullReader();
  let exporter: Telemetry['exporter'] = 'none';
  if (options.connectionString !== '') {
    const { useAzureMonitor } = await import('applicationinsights');
    // Registers its own providers globally; our reader rides along so the endpoint keeps answering in Azure.
    useAzureMonitor({ azureMonitorExporterOptions: { connectionString: options.connectionString }, metricReaders: [reader] });
    exporter = 'azure-monitor';
  } else {
    metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
  }
  defineInstruments();
  let serializer: PrometheusSerializer | undefined;
  return {
    exporter,
    async prometheusText() {
      const { resourceMetrics, errors } = await reader.collect();
      if (errors.length > 0 && resourceMetrics.scopeMetrics.length === 0) {
        throw new AppError('TELEMETRY.COLLECT_FAILED', 'unavailable', `metrics could not be collected: ${String(errors[0])}`);
      }
      // Loaded at the first scrape, not at start (a tenth of a second of a host's start). Without target_info and
      // scope labels: the endpoint serves one host's own instruments.
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      serializer ??= new (require('@opentelemetry/exporter-prometheus') as typeof import('@opentelemetry/exporter-prometheus')).PrometheusSerializer('', false, undefined, true, true);
      return serializer.serialize(resourceMetrics);
    },
  };
}

/** The metrics in Prometheus text format; 503 (`TELEMETRY.NOT_STARTED`) before the composition root started them. */
export async function prometheusText(): Promise<string> {
  if (!started) throw new AppError('TELEMETRY.NOT_STARTED', 'unavailable', 'metrics are not started on this host yet');
  return (await started).prometheusText();
}
