import { hostApp } from '../app';
import { endpoint } from '../http/endpoint';

/** Provisioning targets configured for this installation and the IaC runner's name and version. */
export const runtimeCloudTargets = endpoint({ scope: 'factory.meta.read' }, async ({ deps }) => {
  let version: string | null = null;
  let versionError: string | undefined;
  try {
    version = await deps.iac.version();
  } catch (error) {
    versionError = error instanceof Error ? error.message : String(error);
  }
  return {
    status: 200,
    jsonBody: {
      targets: deps.config.targets,
      iacRunner: { name: deps.iac.name, version, ...(versionError ? { error: versionError } : {}) },
    },
  };
});

hostApp.http('RuntimeCloudTargets', {
  route: 'runtime-cloud/meta/targets',
  methods: ['GET'],
  authLevel: 'anonymous',
  handler: runtimeCloudTargets,
});
