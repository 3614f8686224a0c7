/**
 * A stack's identity: `tenant/project/stack`, Pulumi's organization/project/stack, where the project is the `name`
 * of the stack's `Pulumi.yaml`. A stack name alone is not unique: two tenants (or two projects of one tenant) may
 * both have a `development` stack, and they never share a lock, a state or a resource. Pure.
 */
export interface StackRef {
  readonly tenant: string;
  /** The `name` of the project's `Pulumi.yaml`. */
  readonly project: string;
  /** The stack's own name (`Pulumi.<stack>.yaml`). */
  readonly stack: string;
}

/** A Pulumi project or stack name: letters, digits, `-`, `_`, `.` (never `/`). */
export const STACK_PART_PATTERN = /^[A-Za-z0-9_.-]+$/;

/** `tenant/project/stack`, as messages, views and pool definitions name a stack. */
export function qualifiedStackName(ref: StackRef): string {
  return `${ref.tenant}/${ref.project}/${ref.stack}`;
}

/**
 * The stack a qualified name names, or undefined when it is not one. Project and stack never hold `/`, so the name
 * is read from the right: whatever comes before them is the tenant.
 */
export function parseQualifiedStackName(name: string): StackRef | undefined {
  const parts = name.split('/');
  if (parts.length < 3) return undefined;
  const stack = parts.pop()!;
  const project = parts.pop()!;
  const tenant = parts.join('/');
  if (tenant === '' || !STACK_PART_PATTERN.test(project) || !STACK_PART_PATTERN.test(stack)) return undefined;
  return { tenant, project, stack };
}

export function sameStack(a: StackRef, b: StackRef): boolean {
  return a.tenant === b.tenant && a.project === b.project && a.stack === b.stack;
}

/** The urn Pulumi gives a resource: `urn:pulumi:<stack>::<project>::<qualified type>::<name>`. */
export function resourceUrn(stack: string, project: string, qualifiedType: string, name: string): string {
  return `urn:pulumi:${stack}::${project}::${qualifiedType}::${name}`;
}
