// Node's `url.parse` as `hawk` uses it (host, port, protocol, path and query of a request URL),
// over the browser's URL parser. The path is kept as the client encoded it.
export function parse(s: string) {
  const u = new URL(s, location.href);
  return {
    protocol: u.protocol,
    hostname: u.hostname,
    host: u.host,
    port: u.port,
    pathname: u.pathname,
    search: u.search,
    path: u.pathname + u.search,
    href: u.href,
  };
}

const WhatwgURL = URL;
export { WhatwgURL as URL };
export default { parse, URL: WhatwgURL };
