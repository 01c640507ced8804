// Small pieces every page uses.
import type { ComponentChildren } from 'preact';
import type { ApiError } from './lib/api';
import { when } from './lib/format';

/** A state with its colour and its name (the colour never carries the meaning alone). */
export function State({ state }: { state: string }) {
  return <span class={`state state-${state}`}>{state}</span>;
}

export function Time({ iso }: { iso?: string | null }) {
  if (!iso) return <span>—</span>;
  return <time dateTime={iso}>{when(iso)}</time>;
}

/** An API error as it came: status, code, and the message (which names missing scopes). */
export function ErrorBox({ error, what }: { error: ApiError; what?: string }) {
  const hint =
    error.status === 403 || error.status === 401
      ? 'Sign in with a client that has the scopes named here.'
      : error.status === 404
        ? 'Nothing by that id here: check it, or it may have expired.'
        : undefined;
  return (
    <div class="error" role="alert">
      <p class="error-title">
        {what ? `${what}: ` : ''}
        <strong>
          {error.status ? `${error.status} ` : ''}
          {error.code}
        </strong>
      </p>
      {error.message && <pre class="error-message">{error.message}</pre>}
      {hint && <p class="hint">{hint}</p>}
    </div>
  );
}

export function Json({ value }: { value: unknown }) {
  return <pre class="json">{JSON.stringify(value, null, 2)}</pre>;
}

export function Loading({ what }: { what: string }) {
  return (
    <p class="loading" role="status">
      Loading {what}…
    </p>
  );
}

/** A `<dl>` of label/value pairs; absent values are left out. */
export function Facts({ items }: { items: [string, ComponentChildren | undefined | null][] }) {
  return (
    <dl class="facts">
      {items
        .filter(([, v]) => v !== undefined && v !== null && v !== '')
        .map(([k, v]) => (
          <div key={k}>
            <dt>{k}</dt>
            <dd>{v}</dd>
          </div>
        ))}
    </dl>
  );
}

/** When a polled view was last read (and how long that read took, for the bench). */
export function Updated({ at, took }: { at?: Date; took?: number }) {
  if (!at) return null;
  return (
    <p class="updated" data-took-ms={took === undefined ? undefined : Math.round(took)}>
      Live: updated <time dateTime={at.toISOString()}>{at.toLocaleTimeString()}</time>
    </p>
  );
}

/** One column of a [`Table`]: its header and how a row fills it. */
export interface Column<T> {
  label: string;
  cell: (row: T) => ComponentChildren;
}

/**
 * A table whose first column heads each row; on narrow screens its rows become cards, each
 * cell labelled with its column (`data-label`).
 */
export function Table<T>(props: {
  columns: Column<T>[];
  rows: T[];
  rowKey: (row: T) => string;
  rowProps?: (row: T) => Record<string, string | number | undefined>;
  caption?: ComponentChildren;
  class?: string;
  testid?: string;
}) {
  const { columns, rows, rowKey, rowProps, caption, testid } = props;
  return (
    <div class="table-wrap">
      <table class={`cards ${props.class ?? ''}`} data-testid={testid}>
        {caption && <caption>{caption}</caption>}
        <thead>
          <tr>
            {columns.map((c) => (
              <th scope="col" key={c.label}>
                {c.label}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {rows.map((r) => (
            <tr key={rowKey(r)} {...rowProps?.(r)}>
              {columns.map((c, i) =>
                i === 0 ? (
                  <th scope="row" data-label={c.label} key={c.label}>
                    {c.cell(r)}
                  </th>
                ) : (
                  <td data-label={c.label} key={c.label}>
                    {c.cell(r)}
                  </td>
                ),
              )}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
