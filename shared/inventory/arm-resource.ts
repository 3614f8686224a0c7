import { isOpaque, isPlainObject, type PathSegment } from '../platform/iac/iac-values';
import type { JsonValue } from './drift';

/**
 * How an Azure Resource Manager resource is told apart and compared with what a Pulumi azure-native program set
 * (pure). The rules of case this relies on, and only these:
 *
 * - Resource ids are case-insensitive as a whole (ARM spells `resourceGroups` and `resourcegroups`, provider
 *   namespaces and types in either case: Microsoft.ManagedIdentity and Microsoft.ContainerService answer with
 *   `/resourcegroups/`), and a doubled or trailing `/` means nothing. So are resource types, read from the id, never
 *   from a response's `type` (Service Bus answers `Microsoft.ServiceBus/Namespaces` for a `/namespaces/` id).
 * - Property and tag names are looked up exactly first, then case-insensitively (Insights answers `WorkspaceResourceId`
 *   for Pulumi's `workspaceResourceId`; ARM treats tag names case-insensitively). Values are compared exactly, but for
 *   two: a top-level `location`, by its canonical name (`East US` is `eastus`: lower case without spaces, as
 *   terraform-provider-azurerm's `location.Normalize` has it), and a string that is an ARM id on both sides, by the
 *   id rule above.
 */

/** What an ARM resource id says: the resource's type (`Microsoft.Sql/servers/databases`) and where it lives. */
export interface ArmId {
  /** `Microsoft.Web`; `Microsoft.Resources` for a resource group. */
  readonly namespace: string;
  /** The type below the namespace: `sites`, `servers/databases`, `resourceGroups`. */
  readonly resourceType: string;
  /** `namespace/resourceType`, spelt as the id spells it. */
  readonly type: string;
}

/**
 * The type an ARM resource id names, or undefined when the string is no resource id (a Pulumi provider's uuid, a
 * random string). The type is that of the last `/providers/<namespace>/` in the id (an extension resource such as a
 * role assignment on a site is `Microsoft.Authorization/roleAssignments`), its type segments joined: a child resource
 * `…/Microsoft.Sql/servers/s/databases/d` is `Microsoft.Sql/servers/databases`.
 */
export function parseArmId(id: string): ArmId | undefined {
  const segments = id.split('/').filter((s) => s !== '');
  if (segments.length < 2 || segments[0]!.toLowerCase() !== 'subscriptions') return undefined;
  const at = segments.map((s) => s.toLowerCase()).lastIndexOf('providers');
  if (at < 0) {
    if (segments.length === 4 && segments[2]!.toLowerCase() === 'resourcegroups') return armId('Microsoft.Resources', ['resourceGroups']);
    return undefined;
  }
  const namespace = segments[at + 1];
  const rest = segments.slice(at + 2);
  if (namespace === undefined || rest.length === 0 || rest.length % 2 !== 0) return undefined;
  return armId(
    namespace,
    rest.filter((_, i) => i % 2 === 0),
  );
}

function armId(namespace: string, types: readonly string[]): ArmId {
  const resourceType = types.join('/');
  return { namespace, resourceType, type: `${namespace}/${resourceType}` };
}

/** The id as ids are compared: lower case, without doubled or trailing slashes. */
export function normalArmId(id: string): string {
  return `/${id
    .split('/')
    .filter((s) => s !== '')
    .join('/')
    .toLowerCase()}`;
}

/** The id of a resource group, as `normalArmId` spells it. */
export function resourceGroupId(subscriptionId: string, resourceGroup: string): string {
  return normalArmId(`/subscriptions/${subscriptionId}/resourceGroups/${resourceGroup}`);
}

/** True when `id` is the resource group `groupId` (`resourceGroupId`) itself or a resource in it. */
export function isInGroup(id: string, groupId: string): boolean {
  const normal = normalArmId(id);
  return normal === groupId || normal.startsWith(`${groupId}/`);
}

/** The canonical name of a location: `East US` and `eastus` are both `eastus`. */
export function canonicalLocation(location: string): string {
  return location.toLowerCase().replace(/\s+/g, '');
}

/**
 * The api-version a versioned azure-native token was generated from (`azure-native:web/v20240401:WebApp` is
 * `2024-04-01`, `…/v20230501preview:…` is `2023-05-01-preview`), or undefined for a default-version token, whose
 * version the stack state does not record.
 */
export function apiVersionOfToken(token: string): string | undefined {
  const module = token.split(':')[1] ?? '';
  const match = /\/v(\d{4})(\d{2})(\d{2})(preview)?$/.exec(module);
  return match ? `${match[1]}-${match[2]}-${match[3]}${match[4] ? '-preview' : ''}` : undefined;
}

/**
 * The api-version to read a resource type with, from those its provider registers: the newest stable one (a bare
 * date), or the newest of all when the type has no stable one, as the Azure CLI picks one for `az resource show`.
 * Dates sort as text.
 */
export function newestApiVersion(apiVersions: readonly string[]): string | undefined {
  const newestFirst = [...apiVersions].sort().reverse();
  return newestFirst.find((v) => /^\d{4}-\d{2}-\d{2}$/.test(v)) ?? newestFirst[0];
}

/** The members of an ARM resource that sit beside `properties`, where azure-native leaves them at top level too. */
const ENVELOPE = new Set(['location', 'tags', 'sku', 'kind', 'identity', 'plan', 'zones', 'extendedLocation', 'managedBy']);
/** The resource's identity: the id says it, and it matched. */
const IDENTITY = new Set(['id', 'name', 'type']);

type JsonObject = { readonly [key: string]: JsonValue };

/** What `observedAsDesired` makes of a resource as ARM answered it. */
export interface ObservedAsDesired {
  /** The observed values at the paths the desired inputs set, in the shape of the inputs. */
  readonly properties: JsonObject;
  /**
   * Paths the inputs set that ARM's answer does not show, so they are not compared: inputs that are part of the id
   * (`name`, `resourceGroupName`, `accountName`) or the engine's own (`__createBeforeDelete`), and properties ARM does
   * not return (write-only secrets such as `administratorLoginPassword`, `siteConfig.appSettings`, which is read by
   * another call) or returns under another name (azure-native's `enableHttpsTrafficOnly` is ARM's
   * `supportsHttpsTrafficOnly`: the renames are in the provider's metadata, which is not published as a file).
   */
  readonly uncompared: readonly (readonly PathSegment[])[];
}

/**
 * A resource as ARM answered a GET by id, in the terms of the Pulumi inputs that made it, so that only what the
 * program sets is compared. azure-native flattens `properties.*` to the top level of its inputs and keeps the
 * envelope (`location`, `tags`, `sku`, `kind`, `identity`, `zones`, …) there; an input that is neither is looked up
 * at the top level of the answer (a settings resource's own `properties` map). Inside a value, only the keys the
 * inputs hold are kept, so read-only and server-defaulted properties never show; arrays are compared index by index,
 * each element by the desired one at its index (an element past the desired ones is kept whole, and a different
 * length is drift).
 *
 * A key the answer lacks (or holds `null` for) is uncompared, except inside `tags`: ARM returns a resource's tags
 * whole, so a tag that is not there was removed. Tags that are no object (`"tags": ""` from Insights, or none at all)
 * are no tags. An equivalent value (see the module comment: location, ids) is given as the inputs spell it.
 */
export function observedAsDesired(desired: JsonObject, resource: JsonObject): ObservedAsDesired {
  const uncompared: PathSegment[][] = [];
  const properties: Record<string, JsonValue> = {};
  const nested = isPlainObject(resource.properties) ? resource.properties : {};
  for (const key of Object.keys(desired)) {
    const want = desired[key]!;
    if (key.startsWith('__') || key === 'name') {
      uncompared.push([key]);
      continue;
    }
    if (key === 'tags') {
      properties.tags = projectValue(want, tagsOf(member(resource, 'tags')), [key], uncompared, true);
      continue;
    }
    if (key === 'location' && typeof want === 'string' && !isOpaque(want)) {
      const seen = member(resource, 'location');
      if (seen !== undefined) properties.location = typeof seen === 'string' && canonicalLocation(seen) === canonicalLocation(want) ? want : seen;
      continue;
    }
    // An envelope member is looked for beside `properties`, then in it (a provider may keep a `sku` there); any other
    // in `properties`, then beside it.
    const seen = ENVELOPE.has(key) ? (member(resource, key) ?? member(nested, key)) : (member(nested, key) ?? (IDENTITY.has(key.toLowerCase()) ? undefined : member(resource, key)));
    // An envelope member ARM does not return is not there (no sku, no identity): drift. Any other is not shown.
    if (ENVELOPE.has(key)) {
      if (seen !== undefined) properties[key] = projectValue(want, seen, [key], uncompared, false);
    } else if (seen === undefined || (seen === null && want !== null)) uncompared.push([key]);
    else properties[key] = projectValue(want, seen, [key], uncompared, false);
  }
  return { properties, uncompared };
}

function projectValue(want: JsonValue, seen: JsonValue, path: PathSegment[], uncompared: PathSegment[][], absentIsDrift: boolean): JsonValue {
  if (isOpaque(want)) return seen;
  if (isPlainObject(want) && isPlainObject(seen)) {
    const out: Record<string, JsonValue> = {};
    for (const key of Object.keys(want)) {
      const found = member(seen, key);
      const child = want[key]!;
      if (found === undefined || (found === null && child !== null)) {
        if (!absentIsDrift) uncompared.push([...path, key]);
        continue;
      }
      out[key] = projectValue(child, found, [...path, key], uncompared, absentIsDrift);
    }
    return out;
  }
  if (Array.isArray(want) && Array.isArray(seen)) {
    const wanted: readonly JsonValue[] = want;
    return (seen as readonly JsonValue[]).map((element, i) => (i < wanted.length ? projectValue(wanted[i]!, element, [...path, i], uncompared, absentIsDrift) : element));
  }
  if (typeof want === 'string' && typeof seen === 'string' && want !== seen && parseArmId(want) && parseArmId(seen) && normalArmId(want) === normalArmId(seen)) return want;
  return seen;
}

/** The member named `key`: exactly, else case-insensitively (ARM property and tag names are case-insensitive). */
function member(object: JsonObject, key: string): JsonValue | undefined {
  if (Object.hasOwn(object, key)) return object[key];
  const lower = key.toLowerCase();
  const found = Object.keys(object).find((k) => k.toLowerCase() === lower);
  return found === undefined ? undefined : object[found];
}

function tagsOf(tags: JsonValue | undefined): JsonObject {
  return isPlainObject(tags) ? tags : {};
}
