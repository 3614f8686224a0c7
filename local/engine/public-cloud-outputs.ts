import { configString, drawnHex, type Derive, type Inputs, type OutputContext, type OutputModel } from './output-model';
import { createHash } from 'node:crypto';
import type { JsonObject, JsonValue } from '../../shared/platform/iac/iac-values';

/**
 * The computed outputs of the AWS and Google Cloud resources Pulumi's own templates and examples read (for an
 * installation whose package policy allows `aws`, `aws-native` or `gcp`). Names are auto-named as the Terraform
 * bridge names them (`AutoName`: the program's name, `-`, seven hex digits, `my-bucket` → `my-bucket-4f1c0a2`),
 * ids and ARNs / self links have the layout the providers' schemas document, built from the stack's `aws:region`
 * (`us-east-1` when unset) and an account drawn for the tenant, or from `gcp:project` (a project drawn for the
 * tenant when unset) and `gcp:region` / `gcp:zone`. Addresses are drawn from TEST-NET-3 (203.0.113.0/24): they
 * route nowhere, as nothing in the local cloud does.
 */

type Rules = Readonly<Record<string, Derive>>;

/** The Terraform bridge's auto-name of `property` when not given: `<name>-<7 hex>`. */
const bridgeName =
  (property: string): Derive =>
  (inputs, context) =>
    inputs.string(property) ?? `${context.name}-${drawnHex(context, 'autoname', 7)}`;

/** A value made from the resource's (possibly auto-named) `property` and the context. */
const withName =
  (property: string, make: (name: string, context: OutputContext, inputs: Inputs) => JsonValue | undefined): Derive =>
  (inputs, context) =>
    make(bridgeName(property)(inputs, context) as string, context, inputs);

function region(context: OutputContext): string {
  return configString(context, 'aws:region') ?? 'us-east-1';
}

/** A twelve-digit AWS account id drawn for the tenant. */
function account(context: OutputContext): string {
  const n = createHash('sha256').update(`aws-account\0${context.tenant}`).digest().readBigUInt64BE(0) % 1_000_000_000_000n;
  return n.toString().padStart(12, '0');
}

/** `length` upper-case letters and digits drawn for the resource (a CloudFront id's body). */
function drawnId(context: OutputContext, purpose: string, length: number): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';
  const bytes = createHash('sha256').update(`${purpose}\0${context.tenant}\0${context.urn}`).digest();
  return Array.from(bytes.subarray(0, length), (b) => alphabet[b % alphabet.length]).join('');
}

const s3Bucket: Rules = {
  bucket: bridgeName('bucket'),
  id: bridgeName('bucket'),
  arn: withName('bucket', (b) => `arn:aws:s3:::${b}`),
  bucketDomainName: withName('bucket', (b) => `${b}.s3.amazonaws.com`),
  bucketRegionalDomainName: withName('bucket', (b, c) => `${b}.s3.${region(c)}.amazonaws.com`),
  region: (_, c) => region(c),
  // Set only for a bucket configured as a website, as the provider does.
  websiteEndpoint: withName('bucket', (b, c, i) => (i.value('website') === undefined ? undefined : `${b}.s3-website-${region(c)}.amazonaws.com`)),
  websiteDomain: (inputs, c) => (inputs.value('website') === undefined ? undefined : `s3-website-${region(c)}.amazonaws.com`),
};

/** An AWS resource whose id is its (auto-named) name and whose ARN is `arn:aws:<service>:...:<kind><name>`. */
function named(service: string, kind: string, scope: 'regional' | 'global', extra: Rules = {}, idIsArn = false): Rules {
  const arn = withName('name', (n, c) => `arn:aws:${service}:${scope === 'regional' ? region(c) : ''}:${account(c)}:${kind}${n}`);
  return { name: bridgeName('name'), id: idIsArn ? arn : bridgeName('name'), arn, ...extra };
}

const AWS: Readonly<Record<string, Rules>> = {
  'aws:s3:Bucket': s3Bucket,
  'aws:s3:BucketV2': s3Bucket,
  'aws:iam:Role': named('iam', 'role/', 'global', { uniqueId: (_, c) => `AROA${drawnId(c, 'uniqueId', 17)}` }),
  'aws:iam:Policy': named('iam', 'policy/', 'global', {}, true),
  'aws:iam:User': named('iam', 'user/', 'global'),
  'aws:ecs:Cluster': named('ecs', 'cluster/', 'regional', {}, true),
  'aws:lambda:Function': named('lambda', 'function:', 'regional', {
    invokeArn: withName('name', (n, c) => `arn:aws:apigateway:${region(c)}:lambda:path/2015-03-31/functions/arn:aws:lambda:${region(c)}:${account(c)}:function:${n}/invocations`),
  }),
  'aws:sqs:Queue': named('sqs', '', 'regional', { url: withName('name', (n, c) => `https://sqs.${region(c)}.amazonaws.com/${account(c)}/${n}`) }),
  'aws:sns:Topic': named('sns', '', 'regional', {}, true),
  'aws:dynamodb:Table': named('dynamodb', 'table/', 'regional'),
  'aws:cloudfront:Distribution': {
    id: (_, c) => `E${drawnId(c, 'id', 13)}`,
    arn: (_, c) => `arn:aws:cloudfront::${account(c)}:distribution/E${drawnId(c, 'id', 13)}`,
    domainName: (_, c) => `d${drawnId(c, 'domain', 13).toLowerCase()}.cloudfront.net`,
    // CloudFront's one hosted zone (the provider's documented value).
    hostedZoneId: () => 'Z2FDTNDATAQYW2',
  },
  'aws:cloudfront:OriginAccessControl': { id: (_, c) => `E${drawnId(c, 'id', 13)}` },
  'aws-native:s3:Bucket': {
    bucketName: bridgeName('bucketName'),
    id: bridgeName('bucketName'),
    arn: withName('bucketName', (b) => `arn:aws:s3:::${b}`),
    domainName: withName('bucketName', (b) => `${b}.s3.amazonaws.com`),
    regionalDomainName: withName('bucketName', (b, c) => `${b}.s3.${region(c)}.amazonaws.com`),
    websiteUrl: withName('bucketName', (b, c) => `http://${b}.s3-website-${region(c)}.amazonaws.com`),
  },
};

function project(context: OutputContext): string {
  return configString(context, 'gcp:project') ?? `project-${createHash('sha256').update(`gcp-project\0${context.tenant}`).digest('hex').slice(0, 10)}`;
}

function gcpRegion(inputs: Inputs, context: OutputContext, property = 'region'): string {
  return inputs.string(property) ?? configString(context, 'gcp:region') ?? 'us-central1';
}

function zone(inputs: Inputs, context: OutputContext): string {
  return inputs.string('zone') ?? configString(context, 'gcp:zone') ?? `${gcpRegion(inputs, context)}-a`;
}

/** An address in TEST-NET-3 drawn for the resource. */
function address(context: OutputContext, purpose: string): string {
  return `203.0.113.${(parseInt(drawnHex(context, purpose, 2), 16) % 254) + 1}`;
}

const COMPUTE = 'https://www.googleapis.com/compute/v1/';

/** A Compute Engine resource: `projects/<p>/<where>/<collection>/<name>`, its self link that under the API root. */
function compute(collection: string, where: 'global' | 'regional' | 'zonal', extra: Rules = {}): Rules {
  const path = (name: string, c: OutputContext, i: Inputs) =>
    `projects/${project(c)}/${where === 'global' ? 'global' : where === 'regional' ? `regions/${gcpRegion(i, c)}` : `zones/${zone(i, c)}`}/${collection}/${name}`;
  return {
    name: bridgeName('name'),
    id: withName('name', path),
    selfLink: withName('name', (n, c, i) => `${COMPUTE}${path(n, c, i)}`),
    ...(where === 'global' ? {} : where === 'regional' ? { region: (i, c) => gcpRegion(i, c) } : { zone: (i, c) => zone(i, c) }),
    ...extra,
  };
}

const GCP: Readonly<Record<string, Rules>> = {
  'gcp:storage:Bucket': {
    name: bridgeName('name'),
    id: bridgeName('name'),
    url: withName('name', (n) => `gs://${n}`),
    selfLink: withName('name', (n) => `https://www.googleapis.com/storage/v1/b/${n}`),
  },
  'gcp:storage:BucketObject': {
    name: bridgeName('name'),
    selfLink: withName('name', (n, _, i) => `https://www.googleapis.com/storage/v1/b/${i.string('bucket') ?? ''}/o/${encodeURIComponent(n)}`),
    mediaLink: withName('name', (n, _, i) => `https://storage.googleapis.com/download/storage/v1/b/${i.string('bucket') ?? ''}/o/${encodeURIComponent(n)}?alt=media`),
  },
  'gcp:compute:Network': compute('networks', 'global'),
  'gcp:compute:Subnetwork': compute('subnetworks', 'regional'),
  'gcp:compute:Firewall': compute('firewalls', 'global'),
  'gcp:compute:BackendBucket': compute('backendBuckets', 'global'),
  'gcp:compute:URLMap': compute('urlMaps', 'global'),
  'gcp:compute:TargetHttpProxy': compute('targetHttpProxies', 'global'),
  'gcp:compute:GlobalForwardingRule': compute('forwardingRules', 'global'),
  'gcp:compute:GlobalAddress': compute('addresses', 'global', { address: (i, c) => i.string('address') ?? address(c, 'address') }),
  'gcp:compute:Instance': compute('instances', 'zonal', {
    // Each access config gets its external address, as the API assigns one.
    networkInterfaces: (inputs, context) => {
      const given = inputs.value('networkInterfaces');
      if (!Array.isArray(given)) return undefined;
      return given.map((nic: JsonValue, n) => {
        if (!isObject(nic)) return nic;
        const configs = Array.isArray(nic.accessConfigs) ? nic.accessConfigs.map((ac: JsonValue, k) => (isObject(ac) ? { ...ac, natIp: ac.natIp ?? address(context, `natIp${n}.${k}`) } : ac)) : undefined;
        return { ...nic, name: nic.name ?? `nic${n}`, networkIp: nic.networkIp ?? `10.128.0.${(parseInt(drawnHex(context, `networkIp${n}`, 2), 16) % 250) + 2}`, ...(configs ? { accessConfigs: configs } : {}) };
      });
    },
  }),
  'gcp:cloudfunctionsv2:Function': {
    name: bridgeName('name'),
    location: (i, c) => gcpRegion(i, c, 'location'),
    id: withName('name', (n, c, i) => `projects/${project(c)}/locations/${gcpRegion(i, c, 'location')}/functions/${n}`),
    url: withName('name', (n, c, i) => `https://${gcpRegion(i, c, 'location')}-${project(c)}.cloudfunctions.net/${n}`),
  },
  'gcp:serviceaccount:Account': {
    email: (i, c) => `${i.string('accountId') ?? c.name}@${project(c)}.iam.gserviceaccount.com`,
    name: (i, c) => `projects/${project(c)}/serviceAccounts/${i.string('accountId') ?? c.name}@${project(c)}.iam.gserviceaccount.com`,
  },
};

/** Letters and digits drawn for the resource (an OAuth client's id and secret). */
function drawnToken(context: OutputContext, purpose: string, length: number): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';
  let out = '';
  for (let block = 0; out.length < length; block++) {
    const bytes = createHash('sha256').update(`${purpose}\0${block}\0${context.tenant}\0${context.urn}`).digest();
    out += Array.from(bytes, (b) => alphabet[b % alphabet.length]).join('');
  }
  return out.slice(0, length);
}

/** Software-as-a-service providers Pulumi's templates use: what their APIs assign on create. */
const SAAS: Readonly<Record<string, OutputModel>> = {
  // auth0's Client: the client id the tenant's API assigns, and its secret (a secret output in auth0's schema).
  'auth0:index:Client': {
    outputs: { clientId: (_, c) => drawnToken(c, 'clientId', 32), clientSecret: (_, c) => drawnToken(c, 'clientSecret', 64) },
    secret: ['clientSecret'],
  },
  // linode's Instance: the API labels an instance `linode<id>` when the program gives no label.
  'linode:index:Instance': {
    outputs: {
      label: (i, c) => i.string('label') ?? `linode${parseInt(drawnHex(c, 'id', 7), 16)}`,
      ipAddress: (_, c) => address(c, 'ipAddress'),
    },
  },
  // pinecone's PineconeIndex: the index's host, `<name>-<id>.svc.<environment>.pinecone.io`.
  'pinecone:index:PineconeIndex': {
    outputs: { host: (i, c) => `${i.string('name') ?? c.name}-${drawnHex(c, 'host', 7)}.svc.${drawnHex(c, 'environment', 4)}-${drawnHex(c, 'environment2', 4)}.pinecone.io` },
  },
};

/** The model of an AWS, Google Cloud or other public service type listed here, or undefined. */
export function publicCloudModel(type: string): OutputModel | undefined {
  const rules = (Object.hasOwn(AWS, type) ? AWS[type] : undefined) ?? (Object.hasOwn(GCP, type) ? GCP[type] : undefined);
  return rules ? { outputs: rules } : Object.hasOwn(SAAS, type) ? SAAS[type] : undefined;
}

function isObject(value: JsonValue | undefined): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
