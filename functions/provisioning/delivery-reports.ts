import type { InvocationContext, Timer } from '@azure/functions';
import { moduleApp } from '../app';
import { logOf } from '../log';
import { getDeps } from '../runtime';

/**
 * Every 5 s: sends the DeliveryHost the reports of promotion runs that ended (applied or failed, the receipts'
 * digests, the reason), until it acknowledges each; one that fails waits out its back-off (the error is kept on the
 * row). Several hosts may run it at once: each report is claimed by one pass.
 */
export async function deliveryReports(_timer: Timer, context: InvocationContext): Promise<void> {
  const deps = await getDeps();
  const { sent, failed } = await deps.provisioning.sendDeliveryReports();
  if (failed > 0) logOf(context).warn(`${failed} promotion report(s) not acknowledged by the DeliveryHost; sent again after their back-off`);
  else if (sent > 0) logOf(context).info(`sent ${sent} promotion report(s) to the DeliveryHost`);
}

moduleApp('provisioning').timer('deliveryReports', { schedule: '*/5 * * * * *', handler: deliveryReports });
