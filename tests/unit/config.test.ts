import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { isAbsolute, join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../../shared/platform/config/config';
import { settingKeys } from '../../shared/platform/config/settings';
import { agentPoolNamed, agentPoolOf, backendOfTenant, runnerTargetOf, tenantSegmentProblem } from '../../shared/platform/config/targets';

describe('configuration', () => {
  it('when nothing is set, then the seed defaults apply and the config is frozen', () => {
    const config = parseConfig({});
    expect(config.host.enabledModules).toEqual(['provisioning', 'inventory', 'capacity']);
    expect(config.iac.engine).toBe('pulumi');
    expect(config.host.serviceName).toBe('runtime-cloud');
    expect(config.targets).toEqual([{ id: 'local', kind: 'local-cloud', name: 'Local cloud', location: 'local' }]);
    expect(Object.isFrozen(config.store)).toBe(true);
  });

  it('when EnabledModules lists some modules, then only those are enabled', () => {
    const config = parseConfig({ RuntimeCloud__Host__EnabledModules: 'capacity, inventory' });
    expect(config.host.enabledModules).toEqual(['capacity', 'inventory']);
  });

  it.each([
    ['RuntimeCloud__Host__EnabledModules', 'capacity,billing'],
    ['RuntimeCloud__IaC__Runner', 'terraform'],
    ['RuntimeCloud__Store__Dialect', 'oracle'],
    ['RuntimeCloud__Local__Port', 'eighty'],
    ['RuntimeCloud__Auth__JwksUrl', 'not a url'],
    ['RuntimeCloud__Targets', '{"oops"'],
    ['RuntimeCloud__Targets', '[{"id":"x","kind":"mainframe","name":"X"}]'],
  ])('when %s is %s, then parsing fails naming that key', (key, value) => {
    let caught: unknown;
    try {
      parseConfig({ [key]: value });
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(ConfigError);
    expect((caught as ConfigError).problems.map((p) => p.field.split('.')[0])).toContain(key);
    expect((caught as Error).message).toContain(key);
  });

  it('when Auth__Clients is unset, then no client is bound; set, then its clients map to their tenants', () => {
    expect(parseConfig({}).auth.clients).toEqual({});
    const clients = { '7f3e1c2a-0000-4000-8000-000000000001': 'contoso', 'worker.pool_b-2': 'fabrikam' };
    expect(parseConfig({ RuntimeCloud__Auth__Clients: JSON.stringify(clients) }).auth.clients).toEqual(clients);
  });

  it.each([
    ['not JSON', '{"7f3e1c2a": contoso}', 'RuntimeCloud__Auth__Clients'],
    ['an array', '[["7f3e1c2a","contoso"]]', 'RuntimeCloud__Auth__Clients'],
    ['a tenant that is a number', '{"7f3e1c2a":42}', 'RuntimeCloud__Auth__Clients.7f3e1c2a'],
    ['a tenant that is an object', '{"7f3e1c2a":{"tenant":"contoso"}}', 'RuntimeCloud__Auth__Clients.7f3e1c2a'],
    ['an empty tenant', '{"7f3e1c2a":""}', 'RuntimeCloud__Auth__Clients.7f3e1c2a'],
    ['a client id with a space', '{"7f3e 1c2a":"contoso"}', 'RuntimeCloud__Auth__Clients.7f3e 1c2a'],
    ['a __proto__ client id', '{"__proto__":"contoso"}', 'RuntimeCloud__Auth__Clients.__proto__'],
    ['one client listed twice in different case', '{"7F3E1C2A":"contoso","7f3e1c2a":"fabrikam"}', 'RuntimeCloud__Auth__Clients.7f3e1c2a'],
  ])('when Auth__Clients has %s, then parsing fails naming the key', (_name, value, field) => {
    let caught: unknown;
    try {
      parseConfig({ RuntimeCloud__Auth__Clients: value });
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(ConfigError);
    expect((caught as ConfigError).problems.map((p) => p.field)).toContain(field);
    expect((caught as Error).message).toContain('RuntimeCloud__Auth__Clients');
  });

  it('when a scan interval is under a minute, or a target that is not a local cloud has no backend or one shared by tenants, then parsing fails naming it', () => {
    const problemsOf = (env: Record<string, string>) => {
      try {
        parseConfig(env);
      } catch (error) {
        return (error as ConfigError).problems.map((p) => `${p.field}: ${p.message}`);
      }
      return [];
    };
    expect(parseConfig({ RuntimeCloud__Inventory__ScanIntervalSeconds: '{"production":60}' }).inventory.scanInterval.byEnvironment).toEqual({ production: 60_000 });
    expect(problemsOf({ RuntimeCloud__Inventory__ScanIntervalSeconds: '{"production":30}' })).toEqual([expect.stringMatching(/^RuntimeCloud__Inventory__ScanIntervalSeconds\.production: .*60 seconds at the least/)]);
    const dc = { id: 'dc', kind: 'on-prem', name: 'DC' };
    expect(problemsOf({ RuntimeCloud__Targets: JSON.stringify([dc]) })).toEqual([expect.stringMatching(/^RuntimeCloud__Targets\.0\.backend: .*backend\.url/)]);
    expect(problemsOf({ RuntimeCloud__Targets: JSON.stringify([{ ...dc, backend: { url: 's3://dc-state' } }]) })).toEqual([expect.stringMatching(/^RuntimeCloud__Targets\.0\.backend\.url: must name \{tenant\}/)]);
    expect(problemsOf({ RuntimeCloud__Targets: JSON.stringify([{ ...dc, backend: { url: 's3://dc/{tenant}', secretsProvider: 'hashivault://pulumi' } }]) })).toEqual([
      expect.stringMatching(/^RuntimeCloud__Targets\.0\.backend\.secretsProvider: must name \{tenant\}/),
    ]);
    expect(parseConfig({ RuntimeCloud__Targets: JSON.stringify([{ ...dc, backend: { url: 's3://dc/{tenant}' } }]) }).targets[0]?.backend).toEqual({ url: 's3://dc/{tenant}' });
  });

  it('when the retired RuntimeCloud__Inventory__Observer names the observer of every target, then it is accepted; when a target of another kind is added, then parsing fails naming that target', () => {
    const azure = { id: 'prod-we', kind: 'azure-subscription', name: 'Azure', backend: { url: 'azblob://state-{tenant}' } };
    const aks = { id: 'aks-we', kind: 'aks-cluster', name: 'AKS', backend: { url: 'azblob://state-{tenant}' } };
    // As infra wrote it for an installation of Azure targets only.
    expect(() => parseConfig({ RuntimeCloud__Inventory__Observer: 'azure-resource-manager', RuntimeCloud__Targets: JSON.stringify([azure]) })).not.toThrow();
    expect(() => parseConfig({ RuntimeCloud__Inventory__Observer: 'local-cloud' })).not.toThrow();

    let caught: unknown;
    try {
      parseConfig({ RuntimeCloud__Inventory__Observer: 'azure-resource-manager', RuntimeCloud__Targets: JSON.stringify([azure, aks]) });
    } catch (error) {
      caught = error;
    }

    expect(caught).toBeInstanceOf(ConfigError);
    expect((caught as ConfigError).problems).toEqual([
      { field: 'RuntimeCloud__Inventory__Observer', message: 'is retired: each target is observed as its kind says, and aks-we (aks-cluster) by kubernetes; remove the setting' },
    ]);
    // Unset, a mix of kinds is what one installation may have.
    expect(parseConfig({ RuntimeCloud__Targets: JSON.stringify([azure, aks]) }).targets.map((t) => t.id)).toEqual(['prod-we', 'aks-we']);
  });

  it("when no Git cache folder is set, then it is in the OS temporary folder, never the app's; a relative one is refused naming the setting", () => {
    const cacheDir = parseConfig({}).provisioning.gitCacheDir;
    expect(isAbsolute(cacheDir)).toBe(true);
    expect(relative(tmpdir(), cacheDir).startsWith('..')).toBe(false);
    expect(relative(process.cwd(), cacheDir).startsWith('..')).toBe(true);
    expect(parseConfig({ RuntimeCloud__Provisioning__GitCacheDir: '/mnt/cache/git' }).provisioning.gitCacheDir).toBe('/mnt/cache/git');

    let caught: unknown;
    try {
      parseConfig({ RuntimeCloud__Provisioning__GitCacheDir: 'git-cache' });
    } catch (error) {
      caught = error;
    }

    expect(caught).toBeInstanceOf(ConfigError);
    expect((caught as ConfigError).problems).toEqual([{ field: 'RuntimeCloud__Provisioning__GitCacheDir', message: "must be an absolute path: a relative one would land in the app's folder" }]);
  });

  it("when a job's backend is made for a tenant, then its id is put in both URLs, and an id that could leave its own segment is refused", () => {
    const backend = { url: 's3://state/{tenant}?region=eu', secretsProvider: 'azurekeyvault://kv.vault.azure.net/keys/pulumi-{tenant}' };
    expect(backendOfTenant(backend, 'Demo_team-2')).toEqual({ url: 's3://state/Demo_team-2?region=eu', secretsProvider: 'azurekeyvault://kv.vault.azure.net/keys/pulumi-Demo_team-2' });
    for (const tenant of ['..', 'a/b', 'x?region=us', 'a#b', 'a b', '-a', '', 'a'.repeat(64)]) {
      expect(tenantSegmentProblem(tenant), tenant).toContain('cannot name a state location or key');
      expect(() => backendOfTenant(backend, tenant), tenant).toThrow(expect.objectContaining({ code: 'PROVISIONING.TENANT_NOT_ADDRESSABLE' }));
    }
  });

  it("when a target groups tenants in runner pools, then a tenant's jobs go to its group, else to its own pool, and each pool id names back its target and tenants", () => {
    // Arrange
    const [local, edge] = parseConfig({
      RuntimeCloud__Targets: JSON.stringify([
        { id: 'local', kind: 'local-cloud', name: 'Local', runnerPools: [{ id: 'shared', tenants: ['contoso', 'fabrikam'] }] },
        { id: 'edge', kind: 'local-cloud', name: 'Edge', runnerPool: 'edge-pool' },
      ]),
    }).targets.map(runnerTargetOf);
    const runners = [local!, edge!];

    // Act / Assert
    expect(agentPoolOf(local!, 'contoso')).toBe('shared');
    expect(agentPoolOf(local!, 'northwind')).toBe('local-runner.northwind');
    expect(agentPoolOf(edge!, 'contoso')).toBe('edge-pool.contoso');
    expect(() => agentPoolOf(local!, 'odd..tenant')).toThrow(expect.objectContaining({ code: 'PROVISIONING.TENANT_NOT_ADDRESSABLE' }));
    expect(agentPoolNamed(runners, 'shared')).toMatchObject({ runner: { target: 'local' }, tenants: ['contoso', 'fabrikam'] });
    expect(agentPoolNamed(runners, 'local-runner.northwind')).toMatchObject({ runner: { target: 'local' }, tenants: ['northwind'] });
    expect(agentPoolNamed(runners, 'edge-pool.contoso')).toMatchObject({ runner: { target: 'edge' }, tenants: ['contoso'] });
    // A grouped tenant has no pool of its own on that target; a capacity pool alone, or an unknown one, serves nobody.
    for (const id of ['local-runner.contoso', 'local-runner', 'edge-pool', 'nowhere.contoso', 'local-runner.a..b', '']) expect(agentPoolNamed(runners, id), id).toBeUndefined();
  });

  it('when runner pools are configured ambiguously, then the host refuses to start, naming the setting', () => {
    const problemsOf = (targets: object[]) => {
      try {
        parseConfig({ RuntimeCloud__Targets: JSON.stringify(targets) });
      } catch (error) {
        return (error as ConfigError).problems.map((p) => `${p.field}: ${p.message}`);
      }
      return [];
    };
    const local = { id: 'local', kind: 'local-cloud', name: 'Local' };
    expect(problemsOf([{ ...local, runnerPools: [{ id: 'a', tenants: ['contoso'] }, { id: 'b', tenants: ['contoso'] }] }])).toEqual([expect.stringMatching(/^RuntimeCloud__Targets\.0\.runnerPools\.1\.tenants: tenant contoso is in more than one/)]);
    expect(problemsOf([{ ...local, runnerPools: [{ id: 'a', tenants: ['contoso'] }] }, { ...local, id: 'edge', runnerPools: [{ id: 'a', tenants: ['fabrikam'] }] }])).toEqual([expect.stringMatching(/^RuntimeCloud__Targets\.1\.runnerPools\.0\.id: runner pool a is named twice/)]);
    expect(problemsOf([local, { ...local, id: 'edge', runnerPool: 'local-runner' }])).toEqual([expect.stringMatching(/^RuntimeCloud__Targets\.1\.runnerPool: runner pool local-runner is another target's/)]);
    for (const id of ['with.dot', 'Upper', '-lead', 'x'.repeat(41)]) expect(problemsOf([{ ...local, runnerPools: [{ id, tenants: ['contoso'] }] }]), id).toEqual([expect.stringMatching(/runnerPools\.0\.id: a runner pool id is/)]);
    expect(problemsOf([{ ...local, runnerPools: [{ id: 'a', tenants: [] }] }])).toHaveLength(1);
  });

  it("when a target sets its jobs' maximum durations, then its runners have them (the other kind keeping its default), and a bad one stops the host naming the field", () => {
    // Arrange
    const local = { id: 'local', kind: 'local-cloud', name: 'Local' };
    const problemsOf = (jobMaxMinutes: unknown) => {
      try {
        parseConfig({ RuntimeCloud__Targets: JSON.stringify([{ ...local, jobMaxMinutes }]) });
      } catch (error) {
        return (error as ConfigError).problems.map((p) => `${p.field}: ${p.message}`);
      }
      return [];
    };

    // Act
    const [plain, limited] = parseConfig({ RuntimeCloud__Targets: JSON.stringify([local, { ...local, id: 'edge', jobMaxMinutes: { apply: 240 } }]) }).targets.map(runnerTargetOf);

    // Assert
    expect(plain?.maxJobMs).toEqual({ plan: 30 * 60_000, apply: 120 * 60_000 });
    expect(limited?.maxJobMs).toEqual({ plan: 30 * 60_000, apply: 240 * 60_000 });
    expect(problemsOf({ plan: 0 })).toEqual(['RuntimeCloud__Targets.0.jobMaxMinutes.plan: a maximum job duration is at least 1 minute']);
    expect(problemsOf({ apply: 1441 })).toEqual(['RuntimeCloud__Targets.0.jobMaxMinutes.apply: a maximum job duration is at most 1440 minutes (a day)']);
    expect(problemsOf({ plan: 2.5 })).toEqual(['RuntimeCloud__Targets.0.jobMaxMinutes.plan: a maximum job duration is a whole number of minutes']);
    expect(problemsOf({ plan: '30' })).toEqual(['RuntimeCloud__Targets.0.jobMaxMinutes.plan: a maximum job duration is a whole number of minutes']);
    expect(problemsOf({ build: 5 })).toEqual([expect.stringMatching(/^RuntimeCloud__Targets\.0\.jobMaxMinutes: .*build/)]);
  });

  it('when local.settings.sample.json is read, then it lists exactly the schema keys', () => {
    const sample = JSON.parse(readFileSync(join(__dirname, '../../local.settings.sample.json'), 'utf8')) as {
      Values: Record<string, string>;
    };
    expect(Object.keys(sample.Values).sort()).toEqual([...settingKeys].sort());
    expect(() => parseConfig(sample.Values)).not.toThrow();
  });
});
