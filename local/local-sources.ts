import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

/** The example repository's folder in the state dir (local/example-repository.ts). */
export const EXAMPLE_REPOSITORY_FOLDER = 'desired-state.git';

/** The folder of the state dir where a developer puts repositories of their own to promote from. */
export const LOCAL_REPOSITORIES_FOLDER = 'repos';

/**
 * The local host's default `RuntimeCloud__Provisioning__Sources` for `stateDir`: every tenant may promote from the
 * example repository and from repositories under `<stateDir>/repos/`, nothing else. A default only: a setting in the
 * environment or the host's options replaces it.
 */
export function localSourcesSetting(stateDir: string): string {
  const root = resolve(stateDir);
  return JSON.stringify({
    '*': [{ prefix: pathToFileURL(join(root, EXAMPLE_REPOSITORY_FOLDER)).href }, { prefix: `${pathToFileURL(join(root, LOCAL_REPOSITORIES_FOLDER)).href}/` }],
  });
}
