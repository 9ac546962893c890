// One line of `exercise check`: what was judged, whether it holds, what was seen.
export interface CheckItem {
  title: string;
  ok: boolean;
  detail: string;
}
