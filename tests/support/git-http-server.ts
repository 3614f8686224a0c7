import * as fs from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import * as git from 'isomorphic-git';
import type { TestCertificate } from './self-signed-certificate';

/**
 * A Git "smart HTTP" server (protocol v1, upload-pack only) in memory, serving a local repository through an
 * isomorphic-git `HttpClient`: remote fetches are tested without a network or a Git server. It follows what git's
 * upload-pack does where our code depends on it: it advertises the branches, honours `deepen` with `shallow` lines,
 * stops walking history at commits the client has, treats the client's shallow commits as having no parents (so a
 * shallow client is never sent what lies behind them), and, unless `allowShaWant`, refuses a `want` that is no
 * branch tip (`not our ref`).
 */
export class GitHttpServer implements git.HttpClient {
  /** Like `uploadpack.allowReachableSHA1InWant`: whether a commit that is no branch tip may be asked for. */
  allowShaWant = true;
  /** Upload-pack requests to fail with a dropped connection before answering, for breaking a fetch off. */
  failUploadPacks = 0;
  readonly requests: { readonly method: string; readonly url: string; readonly depth?: number }[] = [];

  constructor(private readonly dir: string) {}

  request = async (request: git.GitHttpRequest): Promise<git.GitHttpResponse> => {
    const method = request.method ?? 'GET';
    if (request.url.endsWith('/info/refs?service=git-upload-pack')) {
      this.requests.push({ method, url: request.url });
      return this.#respond(request.url, await this.#advertise());
    }
    if (request.url.endsWith('/git-upload-pack') && method === 'POST') {
      const lines = parsePktLines(await collect(request.body));
      const depth = lines.find((l) => l.startsWith('deepen '));
      this.requests.push({ method, url: request.url, ...(depth ? { depth: Number(depth.slice(7)) } : {}) });
      if (this.failUploadPacks > 0) {
        this.failUploadPacks--;
        throw Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
      }
      return this.#respond(request.url, await this.#uploadPack(lines));
    }
    return { url: request.url, method, statusCode: 404, statusMessage: 'Not Found', headers: {}, body: chunks([]) };
  };

  async #branches(): Promise<Map<string, string>> {
    const branches = new Map<string, string>();
    for (const branch of await git.listBranches({ fs, dir: this.dir })) {
      branches.set(`refs/heads/${branch}`, await git.resolveRef({ fs, dir: this.dir, ref: branch }));
    }
    return branches;
  }

  async #advertise(): Promise<Buffer[]> {
    const branches = await this.#branches();
    const head = await git.resolveRef({ fs, dir: this.dir, ref: 'HEAD' });
    const capabilities = 'side-band-64k shallow ofs-delta agent=test-server';
    return [
      pktLine('# service=git-upload-pack\n'),
      FLUSH,
      pktLine(`${head} HEAD\0${capabilities}\n`),
      ...[...branches].map(([name, oid]) => pktLine(`${oid} ${name}\n`)),
      FLUSH,
    ];
  }

  async #uploadPack(lines: string[]): Promise<Buffer[]> {
    const wants = lines.filter((l) => l.startsWith('want ')).map((l) => l.slice(5, 45));
    const haves = new Set(lines.filter((l) => l.startsWith('have ')).map((l) => l.slice(5, 45)));
    const clientShallows = new Set(lines.filter((l) => l.startsWith('shallow ')).map((l) => l.slice(8, 48)));
    const depth = Number(lines.find((l) => l.startsWith('deepen '))?.slice(7) ?? 0);
    const tips = new Set((await this.#branches()).values());
    const refused = wants.find((oid) => !this.allowShaWant && !tips.has(oid));
    if (refused) return [pktLine(`ERR upload-pack: not our ref ${refused}\n`), FLUSH];

    const objects = new Set<string>();
    const shallows: string[] = [];
    const queue = wants.map((oid) => ({ oid, level: 1 }));
    for (let next = queue.shift(); next; next = queue.shift()) {
      if (objects.has(next.oid) || haves.has(next.oid)) continue;
      const { commit } = await git.readCommit({ fs, dir: this.dir, oid: next.oid });
      objects.add(next.oid);
      await this.#addTree(commit.tree, objects);
      if (depth > 0 && next.level >= depth) {
        if (commit.parent.length > 0) shallows.push(next.oid);
      } else if (!clientShallows.has(next.oid)) {
        queue.push(...commit.parent.map((oid) => ({ oid, level: next.level + 1 })));
      }
    }
    const { packfile } = await git.packObjects({ fs, dir: this.dir, oids: [...objects] });
    const pack = Buffer.from(packfile!);
    const bands: Buffer[] = [];
    for (let at = 0; at < pack.length; at += 65_515) bands.push(pktLine(Buffer.concat([Buffer.from([1]), pack.subarray(at, at + 65_515)])));
    return [...shallows.map((oid) => pktLine(`shallow ${oid}\n`)), ...(depth > 0 ? [FLUSH] : []), pktLine('NAK\n'), ...bands, FLUSH];
  }

  async #addTree(oid: string, objects: Set<string>): Promise<void> {
    objects.add(oid);
    for (const entry of (await git.readTree({ fs, dir: this.dir, oid })).tree) {
      if (entry.type === 'tree') await this.#addTree(entry.oid, objects);
      else if (entry.type === 'blob') objects.add(entry.oid);
    }
  }

  #respond(url: string, body: Buffer[]): git.GitHttpResponse {
    return { url, method: 'GET', statusCode: 200, statusMessage: 'OK', headers: {}, body: chunks(body) };
  }
}

const FLUSH = Buffer.from('0000');

function pktLine(payload: string | Buffer): Buffer {
  const data = typeof payload === 'string' ? Buffer.from(payload) : payload;
  return Buffer.concat([Buffer.from((data.length + 4).toString(16).padStart(4, '0')), data]);
}

function parsePktLines(data: Buffer): string[] {
  const lines: string[] = [];
  for (let at = 0; at < data.length; ) {
    const length = parseInt(data.subarray(at, at + 4).toString(), 16);
    if (length === 0) {
      at += 4;
      continue;
    }
    lines.push(data.subarray(at + 4, at + length).toString().trimEnd());
    at += length;
  }
  return lines;
}

async function collect(body: git.GitHttpRequest['body']): Promise<Buffer> {
  const parts: Buffer[] = [];
  if (body) for await (const part of body as AsyncIterable<Uint8Array>) parts.push(Buffer.from(part));
  return Buffer.concat(parts);
}

async function* chunks(parts: Buffer[]): AsyncIterableIterator<Uint8Array> {
  for (const part of parts) yield new Uint8Array(part);
}

export interface GitListenerOptions {
  /** Serve HTTPS with this certificate (`selfSignedCertificate()`); plain HTTP without. */
  readonly tls?: TestCertificate;
  /** The host name of the listener's URL, which the certificate must name. Default `127.0.0.1`. */
  readonly host?: 'localhost' | '127.0.0.1';
  /** Answer every request with a 302 to this origin, same path and query (`https://localhost:1234`). */
  readonly redirectTo?: string;
  /** Answer 401 (with `WWW-Authenticate: Basic`, and the Authorization header sent echoed in the status line) unless the request carries exactly these credentials. */
  readonly basicAuth?: { readonly username: string; readonly password: string };
  /** Send every response body in slices of `bytes`, one every `everyMs`: a server that is slow but never silent. */
  readonly trickle?: { readonly bytes: number; readonly everyMs: number };
}

/** A `GitHttpServer` listening on a real port of 127.0.0.1, and what it was asked. */
export interface GitListener {
  /** The origin, e.g. `https://127.0.0.1:43121`; a repository URL is this plus any path (`/team/repo.git`). */
  readonly origin: string;
  readonly received: { readonly method: string; readonly path: string; readonly authorization?: string }[];
  close(): Promise<void>;
}

/**
 * Serves `repository` over real HTTP or HTTPS (node:http / node:https) on 127.0.0.1: each request is handed to
 * `GitHttpServer.request` and its answer written back with git's content types, so a fetch goes through TLS, sockets,
 * isomorphic-git's Node client and simple-get like one against a Git host, with the misbehaviours of `options`.
 */
export async function listenGit(repository: GitHttpServer, options: GitListenerOptions = {}): Promise<GitListener> {
  const received: { method: string; path: string; authorization?: string }[] = [];
  const host = options.host ?? '127.0.0.1';
  let origin = '';
  const handle = (req: IncomingMessage, res: ServerResponse) => {
    void (async () => {
      const method = req.method ?? 'GET';
      const path = req.url ?? '/';
      received.push({ method, path, ...(req.headers.authorization !== undefined ? { authorization: req.headers.authorization } : {}) });
      if (options.redirectTo !== undefined) {
        req.resume();
        res.writeHead(302, { location: `${options.redirectTo}${path}` }).end();
        return;
      }
      if (options.basicAuth) {
        const expected = `Basic ${Buffer.from(`${options.basicAuth.username}:${options.basicAuth.password}`).toString('base64')}`;
        if (req.headers.authorization !== expected) {
          req.resume();
          // Like a careless (or hostile) server, it echoes the credentials it was sent back in its status line.
          res.writeHead(401, `Unauthorized: ${req.headers.authorization ?? 'none'}`, { 'www-authenticate': 'Basic realm="test"' }).end();
          return;
        }
      }
      const body = await readAll(req);
      const answer = await repository.request({
        url: `${origin}${path}`,
        method,
        headers: Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)])),
        body: (async function* () {
          yield new Uint8Array(body);
        })(),
      });
      const service = path.includes('/info/refs') ? 'application/x-git-upload-pack-advertisement' : 'application/x-git-upload-pack-result';
      res.writeHead(answer.statusCode, answer.statusCode === 200 ? { 'content-type': service } : {});
      const whole = answer.body ? await readAll(answer.body) : Buffer.alloc(0);
      if (!options.trickle) {
        res.end(whole);
        return;
      }
      for (let at = 0; at < whole.length && !res.destroyed; at += options.trickle.bytes) {
        res.write(whole.subarray(at, at + options.trickle.bytes));
        await new Promise((done) => setTimeout(done, options.trickle!.everyMs));
      }
      res.end();
    })().catch(() => res.destroy());
  };
  const server: Server = options.tls ? createHttpsServer({ key: options.tls.key, cert: options.tls.cert }, handle) : createHttpServer(handle);
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  origin = `${options.tls ? 'https' : 'http'}://${host}:${(server.address() as AddressInfo).port}`;
  return {
    origin,
    received,
    close: () =>
      new Promise<void>((done) => {
        server.closeAllConnections();
        server.close(() => done());
      }),
  };
}

async function readAll(stream: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const part of stream) parts.push(Buffer.from(part));
  return Buffer.concat(parts);
}
