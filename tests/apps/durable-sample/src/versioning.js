// Orchestration versioning, as the end-to-end app's VersionedOrchestration has it: an instance started without a
// version gets host.json's defaultVersion (2.0 here), and this worker runs that version or older
// (versionMatchStrategy CurrentOrOlder); a newer one fails (versionFailureStrategy Fail).
const df = require('durable-functions');

df.app.orchestration('VersionedOrchestration', function* (context) {
  return `Version: '${context.df.version}'`;
});

/** `{ subVersion? }`: the parent's version and its child's, started with `subVersion` (or the default). */
df.app.orchestration('VersionedParent', function* (context) {
  const { subVersion } = context.df.getInput() ?? {};
  const sub = yield context.df.callSubOrchestrator('VersionedOrchestration', null, undefined, subVersion);
  return `Parent Version: '${context.df.version}' | Sub ${sub}`;
});
