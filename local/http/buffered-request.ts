/**
 * The native request handed to `HttpRequest` (through its `nativeRequest` init, the path the library itself takes for
 * streamed requests). The local host has the whole body in memory already, so text, JSON and bytes are answered from
 * that buffer; a Fetch `Request` is built only when a handler asks for a stream, a blob, form data or a clone.
 * Building a Request and reading its body through undici costs several times the rest of a small request.
 */
export class BufferedRequest {
  readonly headers: Headers;
  #body: Buffer;
  #used = false;
  #fetchRequest: Request | undefined;

  constructor(
    readonly url: string,
    readonly method: string,
    headers: Record<string, string>,
    body: Buffer,
  ) {
    this.headers = new Headers(headers);
    // GET and HEAD carry no body, as the Fetch Request the library would otherwise build.
    this.#body = method === 'GET' || method === 'HEAD' ? Buffer.alloc(0) : body;
  }

  get bodyUsed(): boolean {
    return this.#used || (this.#fetchRequest?.bodyUsed ?? false);
  }

  get body(): ReadableStream<Uint8Array> | null {
    return this.#asFetchRequest().body;
  }

  async text(): Promise<string> {
    return this.#consume().toString('utf8');
  }

  async json(): Promise<unknown> {
    return JSON.parse(this.#consume().toString('utf8'));
  }

  async arrayBuffer(): Promise<ArrayBuffer> {
    const bytes = this.#consume();
    return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
  }

  blob(): Promise<Blob> {
    return this.#asFetchRequest().blob();
  }

  formData(): Promise<FormData> {
    return this.#asFetchRequest().formData();
  }

  clone(): Request {
    return this.#asFetchRequest().clone();
  }

  #consume(): Buffer {
    if (this.bodyUsed) throw new TypeError('Body is unusable: Body has already been read');
    this.#used = true;
    return this.#body;
  }

  #asFetchRequest(): Request {
    this.#fetchRequest ??= new Request(this.url, {
      method: this.method,
      headers: this.headers,
      ...(this.#body.length > 0 && !this.#used ? { body: this.#body } : {}),
    });
    return this.#fetchRequest;
  }
}
