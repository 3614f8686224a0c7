import { DEFAULT_PACKAGES } from '../shared/platform/config/setting-schemas';

/**
 * The local host's default `RuntimeCloud__Provisioning__Packages`: the installation's default list, and what the
 * local engine itself answers for. `local` is the local cloud's package (its plain resources: inputs in, inputs and
 * an id out), with no versions, so any. `std` is the Pulumi Standard Library, whose functions the local engine
 * computes in process (std-functions.ts) and which it refuses where they would read the host (`file`, `abspath`,
 * `pathexpand`, ...); it is not on the installation's list, as the Pulumi engine would run std's real plugin, whose
 * file functions read the runner's files. A default only: a setting in the environment or the host's options
 * replaces it.
 */
export const LOCAL_PACKAGES = `${DEFAULT_PACKAGES},local@*,std@*`;
