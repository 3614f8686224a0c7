import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

/**
 * Issue 10 (telemetry): applicationinsights starts only with APPLICATIONINSIGHTS_CONNECTION_STRING. Each case runs
 * in a fresh process (a MeterProvider and Azure Monitor's instrumentation are process-wide), from the setting
 * through the config to startTelemetry, and reports what it started and what GET /runtime-cloud/metrics would serve.
 */
const ROOT = join(__dirname, '..', '..');

interface Started {
  readonly exporter: string;
  readonly applicationInsightsLoaded: boolean;
  readonly sdkLoaded: boolean;
  readonly answeredDuringStart: number;
  readonly text: string;
}

async function startWith(settings: Record<string, string>): Promise<Started> {
  const script = `
    const root = ${JSON.stringify(ROOT)};
    const loaded = (name) => Object.keys(require.cache).some((file) => file.includes('node_modules/' + name + '/') || file.includes('node_modules\\\\' + name + '\\\\'));
    (async () => {
      const { configFromEnvironment } = require(root + '/shared/platform/config/config.ts');
      const { startTelemetry } = require(root + '/shared/platform/telemetry/telemetry.ts');
      const { recordLeaseGrant } = require(root + '/shared/platform/telemetry/metrics.ts');
      // Connections the start opens (an export, a ping) that connected or failed before it returned: none, if it
      // waited on no answer from the network (nothing listens on port 9: a connection fails at once).
      const net = require('node:net');
      let starting = true;
      let answeredDuringStart = 0;
      const connect = net.Socket.prototype.connect;
      net.Socket.prototype.connect = function (...args) {
        const answered = () => { if (starting) answeredDuringStart++; };
        this.once('connect', answered);
        this.once('error', answered);
        return connect.apply(this, args);
      };
      const telemetry = await startTelemetry(configFromEnvironment().telemetry);
      starting = false;
      net.Socket.prototype.connect = connect;
      recordLeaseGrant('attempt', 'pool-a');
      const text = await telemetry.prometheusText();
      process.stdout.write(JSON.stringify({ exporter: telemetry.exporter, applicationInsightsLoaded: loaded('applicationinsights'), sdkLoaded: loaded('@opentelemetry/sdk-metrics'), answeredDuringStart, text }));
      // Without waiting for an export: the exporter's interval and retries are not this test's business.
      process.exit(0);
    })().catch((error) => { console.error(error); process.exit(1); });`;
  const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !/^(RuntimeCloud__|APPLICATIONINSIGHTS_)/.test(key)));
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', '-e', script], {
    cwd: ROOT,
    env: { ...env, ...settings },
    encoding: 'utf8',
    timeout: 25_000,
  });
  return JSON.parse(stdout) as Started;
}

const GRANT = /^connectsoft_factory_runtime_cloud_capacity_lease_grants_total\{kind="attempt",pool="pool-a"\} 1$/m;

describe('telemetry start', () => {
  it('when APPLICATIONINSIGHTS_CONNECTION_STRING is unset, then applicationinsights is not even loaded, and metrics are served from the process', async () => {
    const started = await startWith({});
    expect(started.exporter).toBe('none');
    expect(started.applicationInsightsLoaded).toBe(false);
    // The check sees packages that are loaded.
    expect(started.sdkLoaded).toBe(true);
    expect(started.text).toMatch(GRANT);
  });

  it('when it is set, then applicationinsights starts without throwing or waiting for the network, and the endpoint still serves the metrics', async () => {
    // Nothing listens on port 9: an export, if one were awaited, would fail rather than be sent anywhere.
    const started = await startWith({ APPLICATIONINSIGHTS_CONNECTION_STRING: 'InstrumentationKey=00000000-0000-0000-0000-000000000000;IngestionEndpoint=http://127.0.0.1:9/' });
    expect(started.exporter).toBe('azure-monitor');
    expect(started.applicationInsightsLoaded).toBe(true);
    expect(started.text).toMatch(GRANT);
    // Loading and starting the distro is synchronous work: no connection it opened was answered before it returned.
    expect(started.answeredDuringStart).toBe(0);
  });
});
