// Scope satisfaction as Taskcluster defines it, to tell which actions the signed-in caller may
// take. The required scopes are the client library's reference entries (upstream's).
import type { ScopeExpr } from './api';

/** True if `have` satisfies the scope `need`: equal, or a pattern ending in `*` that prefixes it. */
export function satisfies(have: string[], need: string): boolean {
  return have.some((h) => h === need || (h.endsWith('*') && need.startsWith(h.slice(0, -1))));
}

/**
 * True if `have` satisfies `expr` with its `<param>`s filled from `params`; a scope naming a
 * parameter that has no value cannot be satisfied.
 */
export function allows(expr: ScopeExpr | undefined, params: Record<string, string | undefined>, have: string[]): boolean {
  if (expr === undefined) return true;
  if (typeof expr === 'string') {
    let missing = false;
    const scope = expr.replace(/<([^<>]+)>/g, (_, name: string) => {
      const v = params[name];
      if (v === undefined) missing = true;
      return v ?? '';
    });
    return !missing && satisfies(have, scope);
  }
  if ('AnyOf' in expr && Array.isArray(expr.AnyOf)) return expr.AnyOf.some((e) => allows(e as ScopeExpr, params, have));
  if ('AllOf' in expr && Array.isArray(expr.AllOf)) return expr.AllOf.every((e) => allows(e as ScopeExpr, params, have));
  // `for each` and conditional forms are not used by the task actions.
  return false;
}
