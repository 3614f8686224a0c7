import { parse as parseYaml } from 'yaml';
import { AppError } from '../platform/errors/app-error';
import { loadDesiredState } from '../platform/git/load-desired-state';
import type { DesiredState, DesiredStateRef } from '../platform/git/desired-state';
import { STACK_PART_PATTERN } from '../platform/iac/stack-ref';
import { packageNotAllowed, packageProblems } from './package-policy';
import { programFiles, projectNotAllowed, projectProblems } from './project-policy';
import type { ProvisioningContext } from './provisioning.context';
import { checkSource, sourceRefusedError } from './source-policy';

/**
 * Desired state as provisioning reads it, at intake, plan and apply alike: a tenant's project at one commit, read
 * from Git only where the installation allows the source (checked before anything is fetched), into the tenant's
 * own cache, with the credential of the rule that allowed it (resolved through the Secret Broker port at fetch time
 * only, never stored).
 */

export interface PromotedProject {
  /** The repository as the source policy normalized it: what runs store and fetch (never with credentials). */
  readonly repository: string;
  readonly desired: DesiredState;
  /** The `name` of its `Pulumi.yaml`: the project part of the stack's identity. */
  readonly project: string;
}

/**
 * Reads the project `ref` names for `tenant`. A source the installation does not allow is refused
 * (`PROVISIONING.SOURCE_NOT_ALLOWED`, `PROVISIONING.SOURCE_CREDENTIALS_INLINE`, kind forbidden) before any fetch;
 * the fetch's own failures are `loadDesiredState`'s.
 */
export async function readProject(ctx: ProvisioningContext, tenant: string, ref: DesiredStateRef): Promise<PromotedProject> {
  const source = checkSource(ctx.sources.policy, tenant, ref.repository, ctx.sources.local);
  if (!source.allowed) throw sourceRefusedError(source, tenant);
  const desired = await loadDesiredState(
    { ...ref, repository: source.repository },
    {
      ...ctx.desiredState,
      tenant,
      resolveCredential: (reference) => ctx.services.governance.resolveSecret(reference, { tenant }),
      ...(source.credentialRef !== undefined ? { credentialRef: source.credentialRef } : {}),
    },
  );
  return { repository: source.repository, desired, project: projectName(desired) };
}

/**
 * Refuses a project that sets what only the installation decides (its runtime, backend, plugins, secrets
 * provider, …: project-policy.ts), before any engine evaluates it: `PROVISIONING.PROJECT_NOT_ALLOWED` naming each key;
 * then one whose program uses a package the installation does not allow (package-policy.ts):
 * `PROVISIONING.PACKAGE_NOT_ALLOWED` naming each type, file and line.
 */
export function checkProjectPolicy(ctx: ProvisioningContext, desired: DesiredState): void {
  // A project read once is kept (frozen) and read again at plan and apply: judged once per host, by what it is.
  const judged = policyVerdicts.get(ctx) ?? new WeakMap<DesiredState, AppError | null>();
  policyVerdicts.set(ctx, judged);
  let verdict = judged.get(desired);
  if (verdict === undefined) {
    verdict = projectVerdict(ctx, desired);
    if (Object.isFrozen(desired)) judged.set(desired, verdict);
  }
  if (verdict) throw verdict;
}

/** By host, then by project read: the refusal, or null when the project is allowed. */
const policyVerdicts = new WeakMap<ProvisioningContext, WeakMap<DesiredState, AppError | null>>();

function projectVerdict(ctx: ProvisioningContext, desired: DesiredState): AppError | null {
  const problems = projectProblems(desired, ctx.projects);
  if (problems.length > 0) return projectNotAllowed(problems);
  const packages = packageProblems(programFiles(desired), ctx.packages);
  if (packages.length > 0) return packageNotAllowed(packages);
  return null;
}

/** The project's `name`, which must be a Pulumi project name (it becomes part of `tenant/project/stack`). */
function projectName(desired: DesiredState): string {
  const known = projectNames.get(desired);
  if (known !== undefined) return known;
  const name = parseProjectName(desired);
  if (Object.isFrozen(desired)) projectNames.set(desired, name);
  return name;
}

/** The names of projects read (frozen, kept by the host's memory of projects), so each is parsed once. */
const projectNames = new WeakMap<DesiredState, string>();

function parseProjectName(desired: DesiredState): string {
  let document: unknown;
  try {
    document = parseYaml(desired.project);
  } catch {
    throw new AppError('IAC.INVALID_PROJECT', 'validation', 'Pulumi.yaml is not valid YAML', { path: 'Pulumi.yaml' });
  }
  const name = (document as { name?: unknown } | null)?.name;
  if (typeof name !== 'string' || name.length > 100 || !STACK_PART_PATTERN.test(name)) {
    throw new AppError('IAC.INVALID_PROJECT', 'validation', 'the name of Pulumi.yaml must be 1 to 100 letters, digits, "-", "_" or "."', { path: 'Pulumi.yaml/name' });
  }
  return name;
}
