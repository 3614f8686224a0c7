import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLocalCloud, type LocalCloud } from '../../local/cloud/local-cloud';
import { AppError } from '../../shared/platform/errors/app-error';
import type { IacEngine } from '../../shared/platform/iac/iac-runner';
import { localIacRunner } from '../../local/engine/local-engine';
import type { ResolveReferences } from '../../shared/platform/iac/plan';
import type { ProjectFiles } from '../../shared/platform/iac/pulumi-yaml-source';
import type { StackRef } from '../../shared/platform/iac/stack-ref';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import { createTestDatabase, REPOSITORY_DIALECTS, skipDialect, type TestDatabase } from '../support/databases';

/**
 * Programs that read what a provider computes (`${resourceGroup.name}`, `${ns.metadata.name}`), planned and applied
 * by the local engine on the local cloud: the plan's known values are the apply's, a re-plan is all same, and two
 * tenants with the same program get their own names and ids. The values themselves against the providers'
 * published data: tests/unit/iac-computed-outputs.test.ts.
 */

/** Pulumi's azure-yaml template (pulumi/templates azure-yaml/Pulumi.yaml) with a Kubernetes namespace beside it. */
const PROGRAM: ProjectFiles = {
  'Pulumi.yaml': `name: shop
runtime: yaml
config:
  azure-native:location: westeurope
resources:
  resourceGroup:
    type: azure-native:resources:ResourceGroup
  sa:
    type: azure-native:storage:StorageAccount
    properties:
      resourceGroupName: \${resourceGroup.name}
      sku:
        name: Standard_LRS
      kind: StorageV2
  ns:
    type: kubernetes:core/v1:Namespace
  app:
    type: kubernetes:apps/v1:Deployment
    properties:
      metadata:
        namespace: \${ns.metadata.name}
      spec:
        replicas: 1
outputs:
  storageAccountName: \${sa.name}
  groupId: \${resourceGroup.id}
  web: \${sa.primaryEndpoints.web}
  namespace: \${app.metadata.namespace}
  deployment: \${app.metadata.name}
`,
};

const resolveNothing: ResolveReferences = () => Promise.reject(new AppError('GOVERNANCE.SECRET_NOT_FOUND', 'not-found', 'no secrets here'));

for (const dialect of REPOSITORY_DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`computed outputs on the local engine on ${dialect}`, () => {
    let database: TestDatabase;
    let cloud: LocalCloud;
    let engine: IacEngine;
    let run = 0;
    let target: string;

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
    });
    afterAll(async () => {
      await database?.drop();
    });
    beforeEach(() => {
      run++;
      target = `target-${run}`;
      const clock = new ManualClock('2026-03-01T10:00:00Z');
      cloud = createLocalCloud({ store: database.store, clock, ids: randomIds });
      engine = localIacRunner({ store: database.store, clock, ids: randomIds, cloud, targetOf: () => target });
    });

    const stackOf = (tenant: string): StackRef => ({ tenant, project: 'shop', stack: `dev-${run}` });

    async function applied(stack: StackRef) {
      const plan = await engine.preview(stack, PROGRAM, {});
      const result = await engine.apply(stack, PROGRAM, {}, plan, resolveNothing);
      return { plan, result };
    }

    it('when a program reads a group\'s name and a namespace\'s name, then the plan knows them, the apply gives the same, and a re-plan is all same', async () => {
      const stack = stackOf('tenant-a');
      const { plan, result } = await applied(stack);
      expect(result.status).toBe('applied');
      const planned = new Map(plan.steps.map((s) => [s.name, s.inputs ?? {}]));
      const group = planned.get('sa')?.resourceGroupName as string;
      expect(group).toMatch(/^resourceGroup[0-9a-f]{8}$/);
      const namespace = (planned.get('app')?.metadata as { namespace: string }).namespace;
      expect(namespace).toMatch(/^ns-[0-9a-f]{8}$/);

      // The target received the names the plan showed.
      const byName = new Map((await cloud.list(target)).map((r) => [r.urn.split('::').pop(), r]));
      expect(byName.get('sa')?.properties).toMatchObject({ resourceGroupName: group });
      expect(byName.get('app')?.properties).toMatchObject({ metadata: { namespace } });

      const outputs = result.outputs as Record<string, string>;
      expect(outputs.storageAccountName).toMatch(/^sa[0-9a-f]{8}$/);
      expect(outputs.groupId).toMatch(new RegExp(`^/subscriptions/[0-9a-f-]{36}/resourceGroups/${group}$`));
      expect(outputs.web).toBe(`https://${outputs.storageAccountName}.web.core.windows.net/`);
      expect(outputs.namespace).toBe(namespace);
      expect(outputs.deployment).toMatch(/^app-[0-9a-f]{8}$/);

      const again = await engine.preview(stack, PROGRAM, {});
      expect(again.steps.map((s) => `${s.op} ${s.name}`)).toEqual(['same resourceGroup', 'same sa', 'same ns', 'same app']);
      expect(again.outputs).toEqual(result.outputs);
    });

    it('when two tenants apply the same program with the same names, then each gets its own names, subscription and ids', async () => {
      const a = (await applied(stackOf('tenant-a'))).result.outputs as Record<string, string>;
      const b = (await applied(stackOf('tenant-b'))).result.outputs as Record<string, string>;
      expect(b.storageAccountName).not.toBe(a.storageAccountName);
      expect(b.deployment).not.toBe(a.deployment);
      expect(b.groupId?.split('/')[2]).not.toBe(a.groupId?.split('/')[2]);
    });
  });
}
