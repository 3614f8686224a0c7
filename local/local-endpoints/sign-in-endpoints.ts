import { z } from 'zod';
import { ROLES } from '../../shared/platform/auth/auth';
import { AppError } from '../../shared/platform/errors/app-error';
import { parseJsonBody } from '../../shared/platform/validation/validation';
import { issueLocalToken } from '../auth/local-issuer';
import type { HostComponent, HostContext } from '../host';
import { answeringProblems } from '../http/raw-problems';

/** How long a console sign-in lasts. */
const SIGN_IN_SECONDS = 8 * 3600;
const NAME = /^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$/;

const signInSchema = z.object({
  name: z.string().regex(NAME, 'a name is letters, digits, ".", "_", "@" and "-", at most 100'),
  role: z.enum(ROLES),
  /** The tenant the person works in; none only for a PlatformAdmin, who acts across tenants. */
  tenant: z.string().regex(NAME, 'a tenant id is letters, digits, ".", "_", "@" and "-", at most 100').optional(),
});

/**
 * The console's "sign in as" on the local host (never registered in Azure, where the console signs in with Entra):
 * `GET runtime-cloud/local/sign-in` tells the console that it may, with the roles to pick from;
 * `POST` with `{ name, role, tenant }` answers a token of the local issuer for that person, the same token
 * `runtime-cloud token --subject NAME --role ROLE --tenant TENANT` prints. Anyone who reaches the local host can
 * already run that command on its state dir: the local host listens on 127.0.0.1 unless told otherwise.
 */
export class SignInEndpoints implements HostComponent {
  readonly name = 'sign-in-endpoints';

  start(context: HostContext): Promise<void> {
    const { config, keys, http } = context;
    http.addRawRoute(['GET'], 'runtime-cloud/local/sign-in', () => Promise.resolve({ status: 200, body: { roles: ROLES, expiresInSeconds: SIGN_IN_SECONDS } }));
    http.addRawRoute(['POST'], 'runtime-cloud/local/sign-in', (request) =>
      answeringProblems(async () => {
        const asked = parseJsonBody(request.body.toString('utf8'), signInSchema);
        if (asked.role !== 'PlatformAdmin' && asked.tenant === undefined) {
          throw new AppError('REQUEST.INVALID', 'validation', `an ${asked.role} works in one tenant: name it`, { errors: [{ field: 'tenant', message: 'required for this role' }] });
        }
        const token = await issueLocalToken(keys, {
          issuer: config.auth.issuer,
          audience: config.auth.audience,
          subject: asked.name,
          roles: [asked.role],
          ttlSeconds: SIGN_IN_SECONDS,
          ...(asked.tenant !== undefined ? { tenant: asked.tenant } : {}),
        });
        return { status: 200, headers: { 'cache-control': 'no-store' }, body: { token, expiresInSeconds: SIGN_IN_SECONDS } };
      }),
    );
    return Promise.resolve();
  }

  stop(): Promise<void> {
    return Promise.resolve();
  }
}
