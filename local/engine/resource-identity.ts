import { AppError } from '../../shared/platform/errors/app-error';
import { invalidProject, isPlainObject, type JsonValue, type PathSegment } from '../../shared/platform/iac/iac-values';
import { resourceUrn } from '../../shared/platform/iac/stack-ref';
import { isProviderType, packageOf, type ResourceDeclaration } from './pulumi-yaml-resource';

/**
 * Who each resource of a program is, as Pulumi's engine names it: its urn (the parent's qualified type before
 * its own, `urn:pulumi:dev::shop::my:Component$aws:s3:Bucket::logs`), its parent's urn, the provider it uses (an
 * explicit one, one it inherits from its parent, the package's `defaultProvider`, or the package's default
 * provider `urn:…::pulumi:providers:<package>::default`), and the urns its aliases name. Pure.
 */

export interface ResourceIdentity {
  readonly urn: string;
  /** The type part of the urn: `parentType$type`, or the type for a resource without a parent. */
  readonly qualifiedType: string;
  readonly parent?: string;
  /** The urn of the provider resource of the program it uses; absent when it uses the package's default. */
  readonly provider?: string;
  /** What the state records: `provider`, or the package's default provider urn. Absent for a provider itself. */
  readonly providerOfRecord?: string;
}

/** The urn Pulumi gives the default provider of a package in a stack. */
export function defaultProviderUrn(stack: string, project: string, pkg: string): string {
  return resourceUrn(stack, project, `pulumi:providers:${pkg}`, 'default');
}

/** The qualified type a urn names (`parentType$type`). */
export function urnQualifiedType(urn: string): string | undefined {
  const parts = urn.split('::');
  return parts.length >= 4 && parts[0]?.startsWith('urn:pulumi:') ? parts[2] : undefined;
}

/**
 * The identities of every resource, in the program's order of declaration (parents are resolved first by name,
 * so the order does not matter). Throws for a provider option that names no provider of the resource's package,
 * and for two resources with one urn.
 */
export function resourceIdentities(stack: string, project: string, declarations: readonly ResourceDeclaration[]): Map<string, ResourceIdentity> {
  const byName = new Map(declarations.map((d) => [d.name, d]));
  const identities = new Map<string, ResourceIdentity>();
  const defaults = new Map<string, string>();
  for (const d of declarations) {
    if (d.defaultProvider !== true) continue;
    const pkg = packageOf(d.type);
    const other = defaults.get(pkg);
    if (other) throw invalidProject(`resources.${d.name}.defaultProvider: ${other} is already the default provider of ${pkg}`, { path: `resources.${d.name}.defaultProvider` });
    defaults.set(pkg, d.name);
  }
  const identityOf = (name: string, trail: readonly string[]): ResourceIdentity => {
    const known = identities.get(name);
    if (known) return known;
    const d = byName.get(name) as ResourceDeclaration;
    const parentName = d.options?.parent;
    if (parentName !== undefined && trail.includes(parentName)) {
      throw new AppError('IAC.PLAN_CYCLE', 'validation', `the parents form a cycle: ${[...trail, name, parentName].join(' -> ')}`, { path: `resources.${name}.options.parent` });
    }
    const parent = parentName === undefined ? undefined : identityOf(checkNamed(byName, parentName, `resources.${name}.options.parent`).name, [...trail, name]);
    const qualifiedType = parent ? `${parent.qualifiedType}$${d.type}` : d.type;
    const urn = resourceUrn(stack, project, qualifiedType, d.logicalName ?? d.name);
    const provider = isProviderType(d.type) ? undefined : providerOf(d, byName, identityOf, defaults, [...trail, name]);
    const identity: ResourceIdentity = {
      urn,
      qualifiedType,
      ...(parent ? { parent: parent.urn } : {}),
      ...(provider ? { provider } : {}),
      ...(isProviderType(d.type) ? {} : { providerOfRecord: provider ?? defaultProviderUrn(stack, project, packageOf(d.type)) }),
    };
    identities.set(name, identity);
    return identity;
  };
  const urns = new Map<string, string>();
  for (const d of declarations) {
    const { urn } = identityOf(d.name, []);
    const other = urns.get(urn);
    if (other) throw invalidProject(`resources.${d.name}: ${other} has the same urn ${urn}`, { path: `resources.${d.name}`, urn });
    urns.set(urn, d.name);
    for (const [i, p] of (d.options?.providers ?? []).entries()) checkProvider(byName, p, undefined, `resources.${d.name}.options.providers[${i}]`);
  }
  return identities;
}

type IdentityOf = (name: string, trail: readonly string[]) => ResourceIdentity;

/** `provider:`, else the provider of this package among `providers:`, the parent's (inherited), the package's default. */
function providerOf(d: ResourceDeclaration, byName: ReadonlyMap<string, ResourceDeclaration>, identityOf: IdentityOf, defaults: ReadonlyMap<string, string>, trail: readonly string[]): string | undefined {
  const pkg = packageOf(d.type);
  if (d.options?.provider !== undefined) {
    return identityOf(checkProvider(byName, d.options.provider, pkg, `resources.${d.name}.options.provider`).name, trail).urn;
  }
  const own = (d.options?.providers ?? []).find((p) => byName.get(p) && packageOf(byName.get(p)?.type ?? '') === pkg);
  if (own !== undefined) return identityOf(own, trail).urn;
  // A child uses its parent's provider of the same package, as Pulumi's SDKs pass providers down.
  for (let parent = d.options?.parent; parent !== undefined; parent = byName.get(parent)?.options?.parent) {
    const p = byName.get(parent);
    if (!p || trail.includes(parent)) break;
    const inherited = p.options?.provider !== undefined && packageOf(p.type) === pkg ? p.options.provider : (p.options?.providers ?? []).find((x) => packageOf(byName.get(x)?.type ?? '') === pkg);
    if (inherited !== undefined) return identityOf(inherited, trail).urn;
  }
  const fallback = defaults.get(pkg);
  return fallback === undefined ? undefined : identityOf(fallback, trail).urn;
}

function checkNamed(byName: ReadonlyMap<string, ResourceDeclaration>, name: string, path: string): ResourceDeclaration {
  const d = byName.get(name);
  if (!d) throw new AppError('IAC.UNKNOWN_REFERENCE', 'validation', `${path}: \${${name}} refers to no resource of the project`, { path, reference: name });
  return d;
}

/** The provider resource `name`, of `pkg` when given. */
function checkProvider(byName: ReadonlyMap<string, ResourceDeclaration>, name: string, pkg: string | undefined, path: string): ResourceDeclaration {
  const d = checkNamed(byName, name, path);
  if (!isProviderType(d.type)) throw invalidProject(`${path}: ${name} is not a provider resource (pulumi:providers:<package>)`, { path });
  if (pkg !== undefined && packageOf(d.type) !== pkg) throw invalidProject(`${path}: ${name} is a provider of ${packageOf(d.type)}, not of ${pkg}`, { path });
  return d;
}

/**
 * The urns a resource's aliases name, as Pulumi's engine reads them: a text is a urn; a mapping changes some of
 * name, type, parent (a resource `${name}` or a urn), noParent, stack and project of the resource's own urn.
 * `evaluate` evaluates interpolations in texts (config, variables).
 */
export function aliasUrns(
  d: ResourceDeclaration,
  identities: ReadonlyMap<string, ResourceIdentity>,
  context: { readonly stack: string; readonly project: string },
  evaluate: (value: JsonValue, path: PathSegment[]) => JsonValue,
): string[] {
  const self = identities.get(d.name) as ResourceIdentity;
  return (d.options?.aliases ?? []).map((alias, i) => {
    const path: PathSegment[] = ['resources', d.name, 'options', 'aliases', i];
    const text = (value: JsonValue | undefined, key: string): string | undefined => {
      if (value === undefined) return undefined;
      const evaluated = evaluate(value, [...path, key]);
      if (typeof evaluated !== 'string') throw invalidProject(`resources.${d.name}.options.aliases[${i}].${key} must be text known at plan time`, { path: `resources.${d.name}.options.aliases[${i}].${key}` });
      return evaluated;
    };
    if (!isPlainObject(alias)) {
      const urn = text(alias, 'urn') as string;
      if (urnQualifiedType(urn) === undefined) throw invalidProject(`resources.${d.name}.options.aliases[${i}] is not a urn`, { path: `resources.${d.name}.options.aliases[${i}]` });
      return urn;
    }
    const urn = text(alias.urn, 'urn');
    if (urn !== undefined) return urn;
    let parentType: string | undefined = self.parent === undefined ? undefined : self.qualifiedType.slice(0, self.qualifiedType.length - d.type.length - 1);
    if (alias.noParent === true) parentType = undefined;
    else if (typeof alias.parent === 'string') {
      const named = /^\$\{([A-Za-z_][\w-]*)\}$/.exec(alias.parent)?.[1];
      const parent = named === undefined ? undefined : identities.get(named);
      parentType = parent ? parent.qualifiedType : urnQualifiedType(text(alias.parent, 'parent') as string);
      if (parentType === undefined) throw invalidProject(`resources.${d.name}.options.aliases[${i}].parent must be a resource \${name} or a urn`, { path: `resources.${d.name}.options.aliases[${i}].parent` });
    }
    const type = text(alias.type, 'type') ?? d.type;
    return resourceUrn(text(alias.stack, 'stack') ?? context.stack, text(alias.project, 'project') ?? context.project, parentType ? `${parentType}$${type}` : type, text(alias.name, 'name') ?? d.logicalName ?? d.name);
  });
}

export { resourceUrn };
