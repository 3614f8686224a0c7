import * as pulumi from '@pulumi/pulumi';
import * as authorization from '@pulumi/azure-native/authorization';

/** Built-in role definition ids (the same in every tenant). */
export const ROLES = {
  storageBlobDataContributor: 'ba92f5b4-2d11-453d-a403-e96b0029c9fe',
  storageQueueDataContributor: '974c5e8b-45b9-4653-ba55-5f855dd0fb88',
  storageTableDataContributor: '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3',
  serviceBusDataReceiver: '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0',
  serviceBusDataSender: '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39',
  monitoringMetricsPublisher: '3913510d-42f4-4e42-8a64-420c390055eb',
  /**
   * An agent pool's identity on each of its own tenants' keys (scope `<vault>/keys/pulumi-<tenant>`): read the key,
   * encrypt and decrypt with it; it cannot make, delete or reach any other key.
   */
  keyVaultCryptoUser: '12338af0-0e69-4776-bea7-57ae8d297424',
  acrPull: '7f951dda-4ed3-4680-a7ca-43fe172d538d',
  /** Agent pool identities only, and only on their own target's scope. */
  contributor: 'b24988ac-6180-42a0-ab88-20f7382dd24c',
  /** Observer identities on their own target's scope: drift scans read, never write. */
  reader: 'acdd72a7-3385-48ef-bd42-f606fba81ae7',
} as const;
export type Role = keyof typeof ROLES;

export interface Grant {
  /** The identity's principal (object) id. */
  readonly principalId: pulumi.Input<string>;
  readonly scope: pulumi.Input<string>;
  readonly role: Role;
  /** The subscription the scope is in: a role definition id names it (targets may be in other subscriptions). */
  readonly subscriptionId: pulumi.Input<string>;
  readonly description: string;
}

/** One role assignment to a managed identity (principal type ServicePrincipal, so a new identity need not replicate first). */
export function assignRole(name: string, { principalId, scope, role, subscriptionId, description }: Grant): authorization.RoleAssignment {
  return new authorization.RoleAssignment(name, {
    scope,
    principalId,
    principalType: authorization.PrincipalType.ServicePrincipal,
    roleDefinitionId: pulumi.interpolate`/subscriptions/${subscriptionId}/providers/Microsoft.Authorization/roleDefinitions/${ROLES[role]}`,
    description,
  });
}
