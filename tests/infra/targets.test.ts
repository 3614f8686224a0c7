import { describe, expect, it } from 'vitest';
import { parseClients, parseRunnerImage, parseSources, parseTargets, poolResourceName, stateNames, type AzureTarget } from '../../infra/targets';

/** The `targets`, `runnerImage` and `runnerRegistryId` config of infra/, parsed without running the program. */

const SUB = '00000000-0000-4000-8000-00000000000a';
const azure = (extra: Record<string, unknown> = {}) => ({ id: 'prod-we', kind: 'azure-subscription', name: 'Production', scope: { subscriptionId: SUB, resourceGroup: 'rg-prod' }, tenants: ['contoso'], ...extra });
const BACKEND = { url: 's3://dc-state/{tenant}', secretsProvider: 'hashivault://pulumi-{tenant}' };
const onPrem = (extra: Record<string, unknown> = {}) => ({ id: 'dc', kind: 'on-prem', name: 'DC', backend: BACKEND, ...extra });
const REGISTRY = `/subscriptions/${SUB}/resourceGroups/rg-images/providers/Microsoft.ContainerRegistry/registries/rchimages`;

describe('infra targets config', () => {
  it('when an Azure target names no pool or runners, then its pool is its id and it runs 2 jobs at once; a customer-hosted target keeps its endpoint', () => {
    expect(parseTargets([azure(), onPrem({ endpoint: 'https://dc.example.test' })])).toEqual([
      {
        id: 'prod-we',
        kind: 'azure-subscription',
        name: 'Production',
        pool: 'prod-we',
        scope: { subscriptionId: SUB, resourceGroup: 'rg-prod' },
        maxRunners: 2,
        tenants: ['contoso'],
        runnerPools: [],
        agentPools: [{ id: 'prod-we.contoso', target: 'prod-we', tenants: ['contoso'], name: poolResourceName('prod-we.contoso') }],
      },
      { id: 'dc', kind: 'on-prem', name: 'DC', endpoint: 'https://dc.example.test', pool: 'dc', runnerPools: [], backend: BACKEND },
    ]);
    expect(parseTargets([azure({ pool: 'blue', runners: { max: 4 } })])[0]).toMatchObject({ pool: 'blue', maxRunners: 4 });
    // A customer-hosted target says how drift scans reach its cluster: an AKS API server with its CA and the identity
    // whose token reads it, or a kubeconfig of its own.
    const aks = { server: 'https://aks-1.hcp.westeurope.azmk8s.io:443', certificateAuthorityData: 'LS0tLS1CRUdJTg==' };
    expect(parseTargets([{ id: 'k', kind: 'aks-cluster', name: 'K', backend: BACKEND, kubernetes: aks, observerClientId: SUB }])[0]).toMatchObject({ kubernetes: aks, observerClientId: SUB });
    expect(parseTargets([onPrem({ kubernetes: { kubeconfig: { path: '/mnt/dc.kubeconfig' } } })])[0]).toMatchObject({ kubernetes: { kubeconfig: { path: '/mnt/dc.kubeconfig' } } });
  });

  it.each([
    ['not an array', { id: 'x' }, 'config targets must be a non-empty JSON array of targets (got {"id":"x"})'],
    ['empty', [], 'config targets must be a non-empty JSON array of targets (got [])'],
    ['no scope', [azure({ scope: undefined })], 'config targets[0].scope is required for an azure-subscription target: { "subscriptionId": "<guid>", "resourceGroup": "<name>" } (got nothing)'],
    ['a subscription that is no GUID', [azure({ scope: { subscriptionId: 'prod', resourceGroup: 'rg' } })], 'config targets[0].scope.subscriptionId must be a subscription id (a GUID) (got "prod")'],
    ['a bad resource group', [azure({ scope: { subscriptionId: SUB, resourceGroup: 'rg.' } })], 'config targets[0].scope.resourceGroup must be a resource group name: 1-90 letters, digits, -_.(), not ending in "." (got "rg.")'],
    ['a scope field too many', [azure({ scope: { subscriptionId: SUB, resourceGroup: 'rg', tags: {} } })], 'config targets[0].scope.tags is not a scope field (known: subscriptionId, resourceGroup)'],
    ['an id in capitals', [azure({ id: 'Prod' })], 'config targets[0].id must be 1-24 lowercase letters, digits and single hyphens, starting with a letter and not ending in a hyphen (got "Prod")'],
    ['an id too long for a job name', [azure({ id: 'a'.repeat(25) })], `config targets[0].id must be 1-24 lowercase letters, digits and single hyphens, starting with a letter and not ending in a hyphen (got "${'a'.repeat(25)}")`],
    ['a pool with a double hyphen', [azure({ pool: 'a--b' })], 'config targets[0].pool must be 1-24 lowercase letters, digits and single hyphens, starting with a letter and not ending in a hyphen (got "a--b")'],
    ['the local cloud', [{ id: 'local', kind: 'local-cloud', name: 'Local' }], "config targets[0].kind local-cloud is the local host's own target and has no place in an Azure deployment"],
    ['an unknown kind', [{ id: 'x', kind: 'gcp-project', name: 'X' }], 'config targets[0].kind must be one of azure-subscription, aks-cluster, on-prem (got "gcp-project")'],
    ['an unknown field', [azure({ pools: 'x' })], 'config targets[0].pools is not a target field (known: id, kind, name, location, endpoint, scope, pool, runners, tenants, runnerPools, backend, kubernetes, observerClientId)'],
    ['no tenants on an Azure target', [azure({ tenants: undefined })], 'config targets[0].tenants is required for an azure-subscription target: the tenants its runners serve, e.g. ["contoso"] (got nothing)'],
    ['an empty tenant list', [azure({ tenants: [] })], 'config targets[0].tenants is required for an azure-subscription target'],
    ['a tenant that cannot name a blob container', [azure({ tenants: ['contoso', 'Fabrikam_EU'] })], 'config targets[0].tenants[1] must be a tenant id that can name its state container state-<tenant> and key pulumi-<tenant>: 1-57 lowercase letters, digits and single hyphens (got "Fabrikam_EU")'],
    ['a tenant too long for its container', [azure({ tenants: ['t'.repeat(58)] })], 'config targets[0].tenants[0] must be a tenant id that can name its state container'],
    ['a tenant twice', [azure({ tenants: ['contoso', 'contoso'] })], 'config targets[0].tenants names contoso twice'],
    ['tenants on an on-prem target', [onPrem({ tenants: ['contoso'] })], 'config targets[0].tenants applies to azure-subscription targets only (dc is on-prem)'],
    ['runner pools that are no array', [azure({ runnerPools: { id: 'x' } })], 'config targets[0].runnerPools must be an array of { "id": "<pool id>", "tenants": ["<tenant>", ...] } (got {"id":"x"})'],
    ['a pool id with a dot', [azure({ runnerPools: [{ id: 'prod-we.contoso', tenants: ['contoso'] }] })], 'config targets[0].runnerPools[0].id must be 1-40 lowercase letters, digits and hyphens, starting with a letter or digit (got "prod-we.contoso")'],
    ['a pool without tenants', [azure({ runnerPools: [{ id: 'shared', tenants: [] }] })], 'config targets[0].runnerPools[0].tenants must be a non-empty array of tenant ids (got [])'],
    ['a pool field too many', [azure({ runnerPools: [{ id: 'shared', tenants: ['contoso'], max: 2 }] })], 'config targets[0].runnerPools[0].max is not a runner pool field (known: id, tenants)'],
    ['a grouped tenant the target does not serve', [azure({ runnerPools: [{ id: 'shared', tenants: ['contoso', 'fabrikam'] }] })], "config targets[0].runnerPools[0].tenants[1] fabrikam is not one of the target's tenants (contoso)"],
    ['a tenant in two pools of a target', [azure({ tenants: ['contoso', 'fabrikam'], runnerPools: [{ id: 'one', tenants: ['contoso'] }, { id: 'two', tenants: ['fabrikam', 'contoso'] }] })], 'config targets[0].runnerPools[1].tenants[1] contoso is already in runner pool one: a tenant is in one pool of a target'],
    ['a customer-hosted pool tenant the host would refuse', [onPrem({ runnerPools: [{ id: 'shared', tenants: ['a/b'] }] })], 'config targets[0].runnerPools[0].tenants[0] must be a tenant id: 1-63 letters, digits, "_" and "-", starting with a letter or digit (got "a/b")'],
    ['one pool id on two targets', [azure({ runnerPools: [{ id: 'shared', tenants: ['contoso'] }] }), onPrem({ runnerPools: [{ id: 'shared', tenants: ['contoso'] }] })], 'config runner pools of prod-we and dc have the same id shared: each pool needs its own'],
    ['no name', [azure({ name: ' ' })], 'config targets[0].name must be a non-empty string (got " ")'],
    ['no runners', [azure({ runners: { max: 0 } })], 'config targets[0].runners.max must be a whole number from 1 to 50 (got 0)'],
    ['a fraction of a runner', [azure({ runners: { max: 1.5 } })], 'config targets[0].runners.max must be a whole number from 1 to 50 (got 1.5)'],
    ['a scope on an on-prem target', [onPrem({ scope: { subscriptionId: SUB, resourceGroup: 'rg' } })], 'config targets[0].scope applies to azure-subscription targets only (dc is on-prem)'],
    ['runners on an AKS target', [{ id: 'k', kind: 'aks-cluster', name: 'K', backend: BACKEND, runners: { max: 2 } }], 'config targets[0].runners applies to azure-subscription targets only (k is aks-cluster)'],
    ['a customer-hosted target without a backend', [onPrem({ backend: undefined })], 'config targets[0].backend is required for a customer-hosted target'],
    ['a backend all tenants would share', [onPrem({ backend: { url: 's3://dc-state' } })], 'config targets[0].backend.url must name {tenant}, so that no two tenants share it (got "s3://dc-state")'],
    ['one secrets key for all tenants', [onPrem({ backend: { url: 's3://dc/{tenant}', secretsProvider: 'hashivault://pulumi' } })], 'config targets[0].backend.secretsProvider must name {tenant}'],
    ['a backend field too many', [onPrem({ backend: { url: 's3://dc/{tenant}', region: 'x' } })], 'config targets[0].backend.region is not a backend field (known: url, secretsProvider)'],
    ['a backend on an Azure target', [azure({ backend: BACKEND })], "config targets[0].backend is this program's for an azure-subscription target"],
    ['cluster access on an Azure target', [azure({ kubernetes: { kubeconfig: { path: '/k' } } })], 'config targets[0].kubernetes applies to customer-hosted targets only (prod-we is azure-subscription)'],
    ['an API server on an on-prem target', [onPrem({ kubernetes: { server: 'https://dc:6443' } })], 'config targets[0].kubernetes: server and certificateAuthorityData are for an aks-cluster target'],
    ['a plain-HTTP API server', [{ id: 'k', kind: 'aks-cluster', name: 'K', backend: BACKEND, kubernetes: { server: 'http://k:443' } }], 'config targets[0].kubernetes.server must be an https:// URL'],
    ['a kubeconfig without a path', [onPrem({ kubernetes: { kubeconfig: { context: 'x' } } })], 'config targets[0].kubernetes.kubeconfig must be { "path": "<file>", "context": "<optional>" }'],
    ['a cluster field too many', [onPrem({ kubernetes: { token: 'x' } })], 'config targets[0].kubernetes.token is not a kubernetes field'],
    ['an observer that is no client id', [onPrem({ observerClientId: 'reader' })], 'config targets[0].observerClientId must be a client id (a GUID) (got "reader")'],
    ['the same id twice', [azure(), azure({ pool: 'other', scope: { subscriptionId: SUB, resourceGroup: 'rg-2' } })], 'config targets prod-we and prod-we have the same id prod-we: each target needs its own'],
    ['one pool for two targets', [azure(), azure({ id: 'b', pool: 'prod-we', scope: { subscriptionId: SUB, resourceGroup: 'rg-2' } })], 'config targets prod-we and b have the same pool prod-we: each target needs its own'],
    ['one scope for two targets', [azure(), azure({ id: 'b', scope: { subscriptionId: SUB, resourceGroup: 'RG-PROD' } })], `config targets prod-we and b have the same scope /subscriptions/${SUB}/resourcegroups/rg-prod: each target needs its own`],
  ])('when a target config has %s, then parsing fails naming the setting', (_case, raw, message) => {
    expect(() => parseTargets(raw)).toThrow(message);
  });

  it("when an Azure target groups some tenants, then each group is one agent pool and every other tenant has its own, '<pool>.<tenant>'", () => {
    const [target] = parseTargets([azure({ pool: 'blue', tenants: ['contoso', 'fabrikam', 'northwind'], runnerPools: [{ id: 'shared', tenants: ['fabrikam', 'contoso'] }] })]) as AzureTarget[];
    expect(target!.agentPools.map(({ id, tenants }) => ({ id, tenants }))).toEqual([
      { id: 'shared', tenants: ['fabrikam', 'contoso'] },
      { id: 'blue.northwind', tenants: ['northwind'] },
    ]);
    expect(target!.runnerPools).toEqual([{ id: 'shared', tenants: ['fabrikam', 'contoso'] }]);
    // A customer-hosted target's groups are the host's to apply: passed on as given, with no tenant list.
    expect(parseTargets([onPrem({ runnerPools: [{ id: 'dc-shared', tenants: ['Contoso_EU', 'fabrikam'] }] })])[0]!.runnerPools).toEqual([{ id: 'dc-shared', tenants: ['Contoso_EU', 'fabrikam'] }]);
  });

  it("when agent pools are named in Azure, then every name makes a Container Apps job name 'runner-<name>' of at most 32 characters, stable, and distinct for ids that share a long stem", () => {
    const jobName = /^[a-z](?:[a-z0-9]|-(?=[a-z0-9])){0,31}$/;
    const ids = ['a.contoso', 'a-shared', `${'x'.repeat(24)}.${'t'.repeat(57)}`, `${'x'.repeat(24)}.${'t'.repeat(56)}u`, '0pool', `${'p'.repeat(15)}-.x`];
    for (const id of ids) expect(`runner-${poolResourceName(id)}`, id).toMatch(jobName);
    expect(new Set(ids.map(poolResourceName)).size).toBe(ids.length);
    expect(poolResourceName('a.contoso')).toBe(poolResourceName('a.contoso'));
    expect(poolResourceName('a.contoso')).toMatch(/^a-contoso-[0-9a-f]{8}$/);
  });

  it('when the runner image is checked, then it is required with an Azure target, from an Azure Container Registry, pinned, and its registry id matches it', () => {
    const azureTargets = parseTargets([azure()]);
    expect(parseRunnerImage(undefined, undefined, parseTargets([onPrem()]))).toBeUndefined();
    expect(parseRunnerImage('rchimages.azurecr.io/runtime-cloud-runner:1.2.3', REGISTRY, azureTargets)).toEqual({
      image: 'rchimages.azurecr.io/runtime-cloud-runner:1.2.3',
      server: 'rchimages.azurecr.io',
      registryId: REGISTRY,
      registrySubscriptionId: SUB,
    });
    expect(parseRunnerImage(`rchimages.azurecr.io/runtime-cloud-runner@sha256:${'a'.repeat(64)}`, REGISTRY, azureTargets)?.server).toBe('rchimages.azurecr.io');

    expect(() => parseRunnerImage(undefined, REGISTRY, azureTargets)).toThrow('config runnerImage is required when a target of kind azure-subscription exists');
    expect(() => parseRunnerImage('rchimages.azurecr.io/runtime-cloud-runner:latest', REGISTRY, azureTargets)).toThrow('config runnerImage must name a fixed build, not :latest');
    expect(() => parseRunnerImage('rchimages.azurecr.io/runtime-cloud-runner', REGISTRY, azureTargets)).toThrow('config runnerImage must be an Azure Container Registry image with a tag or digest');
    expect(() => parseRunnerImage('docker.io/library/node:20', REGISTRY, azureTargets)).toThrow('config runnerImage must be an Azure Container Registry image with a tag or digest');
    expect(() => parseRunnerImage('rchimages.azurecr.io/runtime-cloud-runner:1', undefined, azureTargets)).toThrow('config runnerRegistryId is required with runnerImage');
    expect(() => parseRunnerImage('rchimages.azurecr.io/runtime-cloud-runner:1', '/subscriptions/x/registries/rchimages', azureTargets)).toThrow("config runnerRegistryId must be a container registry's resource id");
    expect(() => parseRunnerImage('other.azurecr.io/runtime-cloud-runner:1', REGISTRY, azureTargets)).toThrow('config runnerRegistryId names the registry rchimages, but runnerImage comes from other');
  });

  it("when state names are derived, then they fit Azure's limits for any prefix and id, and are stable per stack and distinct across stacks", () => {
    const target = (id: string, subscriptionId = SUB) => parseTargets([azure({ id, scope: { subscriptionId, resourceGroup: 'rg' } })])[0] as AzureTarget;
    for (const [prefix, id] of [['rch', 'a'], ['a-very-long-prefix-indeed', 'x'.repeat(24)], ['9rch', 'prod-we'], ['--', 'b-1']] as const) {
      const names = stateNames(prefix, 'production', target(id));
      expect(names.account, `${prefix}/${id}`).toMatch(/^[a-z0-9]{3,24}$/);
      // Key Vault: 3-24 characters, a letter first, a letter or digit last, no two hyphens in a row.
      expect(names.vault, `${prefix}/${id}`).toMatch(/^[a-z](?:[a-z0-9]|-(?=[a-z0-9])){1,22}[a-z0-9]$/);
    }
    expect(stateNames('rch', 'production', target('prod-we'))).toEqual(stateNames('rch', 'production', target('prod-we')));
    expect(stateNames('rch', 'production', target('prod-we')).account).toMatch(/^rchprodwest[0-9a-f]{8}$/);
    expect(stateNames('rch', 'staging', target('prod-we')).account).not.toBe(stateNames('rch', 'production', target('prod-we')).account);
    expect(stateNames('rch', 'production', target('prod-we', '00000000-0000-4000-8000-00000000000b')).vault).not.toBe(stateNames('rch', 'production', target('prod-we')).vault);
  });
  it('when the sources are parsed, then each tenant (or "*") has https repository prefixes; anything that would allow more than was listed fails naming the path', () => {
    const sources = { contoso: [{ prefix: 'https://dev.azure.com/contoso/platform/' }], '*': [{ prefix: 'https://github.com/connectsoft/shared.git', credentialRef: 'broker://git/shared' }] };
    expect(parseSources(sources)).toEqual(sources);

    expect(() => parseSources({})).toThrow('config sources must be a JSON object of tenant id (or "*") → repository prefixes; without it every promotion is refused');
    expect(() => parseSources({ contoso: [] })).toThrow('config sources["contoso"] must be a non-empty array');
    expect(() => parseSources({ 'a/b': [{ prefix: 'https://x.example/a/' }] })).toThrow('config sources["a/b"]: "a/b" is not a tenant id');
    for (const prefix of ['https://dev.azure.com', 'https://dev.azure.com/', 'http://dev.azure.com/contoso/', 'file:///srv/git/', 'https://user:pw@dev.azure.com/contoso/', 'https://dev.azure.com/contoso/?x=1']) {
      expect(() => parseSources({ contoso: [{ prefix }] }), prefix).toThrow('config sources["contoso"][0].prefix must be an https:// repository URL');
    }
    expect(() => parseSources({ contoso: [{ prefix: 'https://dev.azure.com/contoso/', branch: 'main' }] })).toThrow('config sources["contoso"][0] must be {prefix, credentialRef?}');
  });

  it('when the clients are parsed, then each client id is a GUID bound to one tenant id', () => {
    expect(parseClients({ '7f3e1c2a-0000-4000-8000-000000000001': 'contoso' })).toEqual({ '7f3e1c2a-0000-4000-8000-000000000001': 'contoso' });

    expect(() => parseClients([])).toThrow('config clients must be a JSON object of client id → tenant id');
    expect(() => parseClients({ console: 'contoso' })).toThrow('config clients: "console" is not a client (application) id');
    expect(() => parseClients({ '7f3e1c2a-0000-4000-8000-000000000001': '' })).toThrow('config clients["7f3e1c2a-0000-4000-8000-000000000001"] must be a tenant id');
  });
});
