/**
 * Layer rules of docs/architecture.md ("Layers and their import rules"), checked by `npm run check`:
 * functions → shared/<module> → shared/platform; shared never imports functions/; nothing deployed (functions/, shared/,
 * runner/) imports the twin (local/) or tests/; pure model files (shared/<module>/<name>.ts without a role suffix)
 * import nothing that does I/O; the lease certificate verifier (verifier/) imports jose and nothing of the host.
 */
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'product-not-to-twin',
      severity: 'error',
      comment: 'local/ is the twin (the local engine, cloud, bus, external services, Durable schema): what is deployed (functions/, shared/, the runner image) never loads it; the local host injects it (shared/deps.ts DepsOverrides.twin).',
      from: { path: '^(functions|shared|runner)/' },
      to: { path: '^local/' },
    },
    {
      name: 'shared-not-to-functions-or-local',
      severity: 'error',
      comment: 'shared/ is what the functions run on; it never reaches back into triggers or the local host.',
      from: { path: '^shared/' },
      to: { path: '^(functions|local|tests)/' },
    },
    {
      name: 'functions-not-to-local',
      severity: 'error',
      comment: 'functions/ is deployed to Azure; local/ is never deployed.',
      from: { path: '^functions/' },
      to: { path: '^(local|tests)/' },
    },
    {
      name: 'platform-not-to-modules',
      severity: 'error',
      comment: 'shared/platform is cross-cutting; it knows no module.',
      from: { path: '^shared/platform/' },
      to: { path: '^shared/(provisioning|inventory|capacity)/' },
    },
    {
      name: 'pure-models-without-io',
      severity: 'error',
      comment: 'model files (no role suffix) are pure: no database, storage, network, file or process access.',
      from: {
        path: '^shared/(provisioning|inventory|capacity)/[^/]+\\.ts$',
        pathNot: '\\.(service|context|repository|tables|migrations|adapter|client|seed)\\.ts$',
      },
      to: {
        path: [
          'node_modules/(kysely|pg|better-sqlite3|tedious|tarn|@azure|durable-functions|isomorphic-git|@pulumi)',
          '^shared/platform/(sql|tables|bus/outbox|iac|auth)',
          '^(fs|node:fs|net|node:net|http|node:http|https|node:https|child_process|node:child_process)$',
        ],
        // Pure themselves: the one notion of a secret or opaque value and of an ignore-rule path (iac-values), a
        // stack's identity (stack-ref), which the modules' models share with the engines, and where a project's
        // program is read from (pulumi-yaml-source), so the project policy checks the file the engine reads, and which
        // keys are function calls (pulumi-yaml-functions), so the package policy finds the invokes the engine finds;
        // and the `Plan` and `ApplyResult` shapes (plan), which the receipt model (receipt.ts) carries.
        pathNot: '^shared/platform/iac/(iac-values|stack-ref|pulumi-yaml-source|pulumi-yaml-functions|plan)\\.ts$',
      },
    },
    {
      name: 'runner-only-to-platform',
      severity: 'error',
      comment: 'runner/ is the runner agent (its own image): it knows engines and the job protocol, never the host.',
      from: { path: '^runner/' },
      to: { path: '^(functions|local|tests|shared/(provisioning|inventory|capacity|deps|migrations))' },
    },
    {
      name: 'verifier-standalone',
      severity: 'error',
      comment: 'verifier/ is what protected resources take to check lease certificates offline: it imports jose and its own files only, never the host (functions/, shared/, local/, runner/) nor anything else a resource would have to carry.',
      from: { path: '^verifier/' },
      to: { pathNot: ['^verifier/', '^node_modules/jose/'] },
    },
    {
      name: 'no-circular',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    exclude: { path: '(^|/)(node_modules|dist|\\.tmp)/' },
  },
};
