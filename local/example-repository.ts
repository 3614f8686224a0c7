import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as git from 'isomorphic-git';
import type { PromotionApproved } from '../shared/provisioning/promotion';
import { ensureError } from '../shared/platform/errors/app-error';
import { randomIds, systemClock, type Clock, type Ids } from '../shared/platform/time/clock';
import type { HostComponent } from './host';
import { EXAMPLE_REPOSITORY_FOLDER } from './local-sources';

/** The example desired state in this repository: one Pulumi YAML project with a development and a production stack. */
export const EXAMPLES_DIR = join(__dirname, '../infra/examples/desired-state');

/** The project's folder inside the example repository. */
export const EXAMPLE_PROJECT_PATH = 'app';

export const EXAMPLE_ENVIRONMENTS = ['development', 'production'] as const;
export type ExampleEnvironment = (typeof EXAMPLE_ENVIRONMENTS)[number];

export interface ExampleRepository {
  /** The bare repository's folder: `<stateDir>/desired-state.git`. */
  readonly path: string;
  /** The same folder as a `file://` URL, the form a promotion names it by. */
  readonly url: string;
  /** The commit `main` points at: the examples as they are now. */
  readonly commit: string;
}

const BRANCH = 'refs/heads/main';
const AUTHOR = { name: 'runtime-cloud', email: 'runtime-cloud@localhost' };

/**
 * Makes `<stateDir>/desired-state.git` hold the example desired state on `main`, and returns its commit. The first
 * call creates the repository; a later call commits only when the examples changed since (same files, same
 * commit), so every promotion made from it names a commit that stays readable.
 *
 * The repository is bare: nothing edits a work tree in it; a developer can clone it, commit and push back.
 * The commit is built from the files' content (blobs and trees written directly), so whether anything changed is
 * one comparison of tree ids, unaffected by file times. Two processes calling this at once may each write a commit
 * of the same tree; `main` ends at one of them and both stay readable, so neither caller's answer is wrong.
 */
export async function ensureExampleRepository(
  stateDir: string,
  options: { readonly source?: string; readonly clock?: Clock } = {},
): Promise<ExampleRepository> {
  const gitdir = resolve(stateDir, EXAMPLE_REPOSITORY_FOLDER);
  const source = options.source ?? EXAMPLES_DIR;
  await git.init({ fs, dir: gitdir, bare: true, defaultBranch: 'main' });
  const tree = await writeFolder(gitdir, source);
  const head = await git.resolveRef({ fs, gitdir, ref: BRANCH }).catch(() => undefined);
  if (head !== undefined && (await git.readCommit({ fs, gitdir, oid: head })).commit.tree === tree) {
    return { path: gitdir, url: pathToFileURL(gitdir).href, commit: head };
  }
  const timestamp = Math.floor((options.clock ?? systemClock).now().getTime() / 1000);
  const signature = { ...AUTHOR, timestamp, timezoneOffset: 0 };
  const commit = await git.writeCommit({
    fs,
    gitdir,
    commit: {
      message: head === undefined ? 'Example desired state\n' : 'Example desired state: the examples changed\n',
      tree,
      parent: head === undefined ? [] : [head],
      author: signature,
      committer: signature,
    },
  });
  await git.writeRef({ fs, gitdir, ref: BRANCH, value: commit, force: true });
  return { path: gitdir, url: pathToFileURL(gitdir).href, commit };
}

/** Writes `folder` (files and subfolders, recursively) as Git objects and returns its tree id. */
async function writeFolder(gitdir: string, folder: string): Promise<string> {
  const tree: git.TreeEntry[] = [];
  for (const entry of fs.readdirSync(folder, { withFileTypes: true })) {
    const path = join(folder, entry.name);
    if (entry.isDirectory()) {
      tree.push({ mode: '040000', path: entry.name, type: 'tree', oid: await writeFolder(gitdir, path) });
    } else if (entry.isFile()) {
      tree.push({ mode: '100644', path: entry.name, type: 'blob', oid: await git.writeBlob({ fs, gitdir, blob: fs.readFileSync(path) }) });
    }
  }
  return git.writeTree({ fs, gitdir, tree });
}

/** The environment a promotion of the example targets, per tier: the stack is named after it. */
const ENVIRONMENTS: Record<ExampleEnvironment, PromotionApproved['environment']> = {
  development: { id: 'env-demo-development', name: 'development', tier: 'development' },
  production: { id: 'env-demo-production', name: 'production', tier: 'production' },
};

/**
 * A `PromotionApproved` of the example project to `environment`, as DeliveryHost would send it: a fresh
 * promotionId each time, the repository's current commit, the stack named after the environment.
 */
export function examplePromotion(
  environment: ExampleEnvironment,
  repository: ExampleRepository,
  options: { readonly clock?: Clock; readonly ids?: Ids } = {},
): PromotionApproved {
  return {
    promotionId: (options.ids ?? randomIds).next('prom'),
    tenantId: 'demo-team',
    environment: ENVIRONMENTS[environment],
    // The version names the commit, so two promotions of different example states read as different releases.
    release: { name: 'demo-app', version: `1.0.0+${repository.commit.slice(0, 7)}` },
    desiredState: { repository: repository.url, commit: repository.commit, path: EXAMPLE_PROJECT_PATH, stack: environment },
    requestedBy: 'local-developer',
    approvedAt: (options.clock ?? systemClock).now().toISOString(),
  };
}

/** The Secret Broker references of the example's stack files; the default reference store gets a value for each. */
const EXAMPLE_SECRET_REFERENCES = ['broker://runtime-cloud/app-db-password-development', 'broker://runtime-cloud/app-db-password'];

/** The Config Platform references of the example's stack files, with the values the default reference store gives them. */
const EXAMPLE_CONFIG_VALUES = { 'platform://app/feature-flags': '{"newCheckout":false}' };

/**
 * Writes `<stateDir>/references.json` (the local reference store, shared/platform/secrets/local-references.ts) with a
 * value for each of the example's references, unless the file exists: then it is the developer's and stays as it is.
 * The passwords are random per state dir, so no password is shared by every checkout; the file is readable by its
 * owner only. Values are never printed.
 */
function ensureExampleReferences(stateDir: string): void {
  const file = resolve(stateDir, 'references.json');
  const secrets = Object.fromEntries(EXAMPLE_SECRET_REFERENCES.map((reference) => [reference, `local-${randomBytes(18).toString('base64url')}`]));
  fs.mkdirSync(stateDir, { recursive: true });
  try {
    // 'wx': created only when absent, atomically, so hosts starting at once on one state dir never overwrite each other.
    fs.writeFileSync(file, `${JSON.stringify({ secrets, config: EXAMPLE_CONFIG_VALUES }, null, 2)}\n`, { flag: 'wx', mode: 0o600 });
  } catch (thrown) {
    if ((ensureError(thrown) as { code?: unknown }).code !== 'EEXIST') throw thrown;
  }
}

/** Whether the example repository exists: its `main` points at a commit. */
async function hasExampleRepository(stateDir: string): Promise<boolean> {
  const gitdir = resolve(stateDir, EXAMPLE_REPOSITORY_FOLDER);
  return git.resolveRef({ fs, gitdir, ref: BRANCH }).then(
    () => true,
    () => false,
  );
}

/**
 * Start-up of the local host: a state dir without the example repository gets one, and one without
 * `references.json` gets the example's default. A state dir that has them is left alone (one ref read and one
 * failed exclusive create), so a start never moves `main` under commits a developer pushed to it (the
 * `example promotion` command is what commits changed examples).
 * Only when the provisioning module is enabled.
 */
export function exampleDesiredStateComponent(): HostComponent {
  return {
    name: 'example-desired-state',
    async start({ config }) {
      if (!config.host.enabledModules.includes('provisioning')) return;
      const stateDir = resolve(config.local.stateDir);
      if (!(await hasExampleRepository(stateDir))) await ensureExampleRepository(stateDir);
      ensureExampleReferences(stateDir);
    },
    stop: () => Promise.resolve(),
  };
}
