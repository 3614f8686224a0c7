import Module from 'node:module';
import { dirname } from 'node:path';

/**
 * Azurite's Telemetry module loads the Application Insights SDK, and OpenTelemetry's SDKs with it, as it loads,
 * though Azurite uses it only once started with telemetry on (`AzuriteTelemetryClient.init`), which the local host
 * never does: that was 0.7 s of the 1.1 s of CPU that loading Azurite's Table server took, in every host start. The
 * local host loads Azurite with that SDK replaced by an empty module: imported before Azurite, by table-server.ts and
 * blob-server.ts.
 */
const sdk = require.resolve('applicationinsights', { paths: [dirname(require.resolve('azurite/package.json'))] });
if (!require.cache[sdk]) {
  const empty = new Module(sdk);
  empty.filename = sdk;
  empty.loaded = true;
  require.cache[sdk] = empty;
}
