// Declarations for the untyped JavaScript packages the inspector imports.
declare module 'crypto-js/hmac-sha256' {
  const f: (message: string, key: string) => unknown;
  export default f;
}
declare module 'crypto-js/sha256' {
  const f: (message: string) => unknown;
  export default f;
}
declare module 'crypto-js/enc-base64' {
  const e: { stringify(words: unknown): string };
  export default e;
}

declare module 'taskcluster-client-web/src/Client' {
  /** A reference entry: one API method. */
  export interface Entry {
    name: string;
    method: string;
    route: string;
    args: string[];
    query?: string[];
    input?: boolean;
    output?: boolean;
    scopes?: ScopeExpr;
    type: 'function';
  }
  export type ScopeExpr = string | { AnyOf: ScopeExpr[] } | { AllOf: ScopeExpr[] } | Record<string, unknown>;
  export interface Credentials {
    clientId: string;
    accessToken: string;
    certificate?: string;
  }
  export interface Options {
    rootUrl: string;
    credentials?: Credentials | null;
    retries?: number;
  }
  export type Method = ((...args: any[]) => Promise<any>) & { entry: Entry };
  export default class Client {
    constructor(options: Options & { reference?: unknown });
    options: Options;
    buildUrl(method: Method, ...args: unknown[]): string;
    buildSignedUrl(method: Method, ...args: unknown[]): Promise<string>;
    buildSignedUrlSync(method: Method, ...args: unknown[]): string;
    static create(reference: unknown): new (options: Options) => Client & Record<string, Method>;
  }
}
declare module 'taskcluster-client-web/src/clients/Queue' {
  import Client, { Method, Options } from 'taskcluster-client-web/src/Client';
  export default class Queue extends Client {
    constructor(options: Options);
    [name: string]: Method | any;
  }
}
