/**
 * `npm run contract -- --governance https://… [--control-plane URL] [--knowledge URL] [--config-platform URL] [--delivery URL]`: the
 * contract suite (suite.ts) against any implementation of the contracts in contracts/, for the sibling services'
 * teams. Tokens: Entra tokens for each service's audience (`--<service>-audience`, defaults as the host's settings)
 * from @azure/identity's default credential (`az login`, a managed identity, …), or the fixed bearer token in
 * RUNTIME_CLOUD_CONTRACT_TOKEN. Prints one line per case; exits 1 when a case fails.
 */
import { parseArgs } from 'node:util';
import { parseConfig } from '../../shared/platform/config/config';
import { hostPeerTokens, type PeerTokens } from '../../shared/platform/contracts/peer-transport';
import { contractCases, type SuitePeers } from './suite';

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      governance: { type: 'string' },
      'control-plane': { type: 'string' },
      knowledge: { type: 'string' },
      'config-platform': { type: 'string' },
      delivery: { type: 'string' },
      'governance-audience': { type: 'string' },
      'control-plane-audience': { type: 'string' },
      'knowledge-audience': { type: 'string' },
      'config-platform-audience': { type: 'string' },
      'delivery-audience': { type: 'string' },
    },
  });
  const defaults = parseConfig({}).peers;
  const peer = (url: string | undefined, audience: string | undefined, fallback: string) => (url ? { url, audience: audience ?? fallback } : undefined);
  const peers: SuitePeers = {
    ...optional('governance', peer(values.governance, values['governance-audience'], defaults.governance.audience)),
    ...optional('controlPlane', peer(values['control-plane'], values['control-plane-audience'], defaults.controlPlane.audience)),
    ...optional('knowledge', peer(values.knowledge, values['knowledge-audience'], defaults.knowledge.audience)),
    ...optional('configPlatform', peer(values['config-platform'], values['config-platform-audience'], defaults.configPlatform.audience)),
    ...optional('delivery', peer(values.delivery, values['delivery-audience'], defaults.delivery.audience)),
  };
  if (Object.keys(peers).length === 0) {
    process.stderr.write('name at least one endpoint: --governance, --control-plane, --knowledge, --config-platform or --delivery\n');
    return 2;
  }
  const fixed = process.env.RUNTIME_CLOUD_CONTRACT_TOKEN;
  const tokens: PeerTokens = fixed ? () => Promise.resolve(fixed) : hostPeerTokens('');
  let failed = 0;
  for (const contractCase of contractCases(peers, tokens)) {
    try {
      await contractCase.run();
      process.stdout.write(`pass  ${contractCase.service}: ${contractCase.name}\n`);
    } catch (error) {
      failed++;
      process.stdout.write(`FAIL  ${contractCase.service}: ${contractCase.name}\n      ${error instanceof Error ? error.message.split('\n').join('\n      ') : String(error)}\n`);
    }
  }
  process.stdout.write(failed === 0 ? 'every case passed\n' : `${failed} case(s) failed\n`);
  return failed === 0 ? 0 : 1;
}

function optional<K extends keyof SuitePeers>(key: K, value: SuitePeers[K]): Partial<SuitePeers> {
  return value ? { [key]: value } : {};
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(2);
  },
);
