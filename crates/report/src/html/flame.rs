//! Flame graphs of a run's on-CPU samples as inline SVG, with a little inline script for
//! what flamegraph.pl's graphs do: click a frame to zoom to it (its ancestors stay, faded,
//! below it), click the bottom frame or "Reset zoom" to go back, "Search" to highlight the
//! frames whose name matches a regular expression and say what share of the samples they
//! hold. Nothing is fetched. Without the script the graph still shows, unzoomed, with a
//! tooltip per frame.
//!
//! The root is at the bottom ("all"), then each stack's process and thread, its user frames
//! and its kernel frames upwards. A frame's width is its samples (its own and its
//! callees'). Frames narrower than a tenth of a pixel are left out (their samples still
//! count in their parent). Colours: task names grey-blue, user frames red to yellow,
//! kernel frames orange, a guest purple; in the differential graph, red for a frame whose
//! share of the samples grew from the smallest to the largest swept value, blue for one
//! that shrank, white for no change.

use std::collections::BTreeMap;
use std::fmt::Write;

use vmscale_run::findings::StackProfile;

use super::escape;

/// Drawing width in SVG units (the page scales it to fit).
const WIDTH: f64 = 1200.0;
const FRAME_HEIGHT: f64 = 16.0;
const PAD_TOP: f64 = 30.0;
const PAD_BOTTOM: f64 = 24.0;
const SIDE: f64 = 10.0;
/// Average glyph width at the 11 px monospace font used in frames.
const CHAR_WIDTH: f64 = 6.7;
/// Deepest frame drawn.
const MAX_DEPTH: usize = 160;
/// Frames drawn at most per graph (about 200 bytes each): past it the narrowest are left
/// out, their samples still counted in their callers.
const MAX_FRAMES: usize = 2_500;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Root,
    Task,
    User,
    Kernel,
}

/// One node of the merged stack tree.
#[derive(Debug)]
struct Node {
    name: u32,
    kind: Kind,
    samples: u64,
    /// Samples at the same path in the comparison profile (differential graphs only).
    before: u64,
    children: BTreeMap<(u32, u8), usize>,
}

struct Tree {
    nodes: Vec<Node>,
    names: Vec<String>,
}

impl Tree {
    fn new() -> Tree {
        Tree {
            nodes: vec![Node {
                name: 0,
                kind: Kind::Root,
                samples: 0,
                before: 0,
                children: BTreeMap::new(),
            }],
            names: vec!["all".to_string()],
        }
    }

    fn name_id(&mut self, name: &str, ids: &mut BTreeMap<String, u32>) -> u32 {
        if let Some(&id) = ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_string());
        ids.insert(name.to_string(), id);
        id
    }

    /// Adds every stack of `profile`; `before` says into which count.
    fn add(&mut self, profile: &StackProfile, before: bool, ids: &mut BTreeMap<String, u32>) {
        for stack in &profile.stacks {
            let mut at = 0;
            if before {
                self.nodes[0].before += stack.samples;
            } else {
                self.nodes[0].samples += stack.samples;
            }
            for (i, &frame) in stack.frames.iter().enumerate() {
                let Some(name) = profile.names.get(frame as usize) else {
                    break;
                };
                let i = i as u32;
                // A record without user_from has one task frame.
                let user_from = if stack.user_from == 0 {
                    1
                } else {
                    stack.user_from
                };
                let kind = if i >= stack.kernel_from {
                    Kind::Kernel
                } else if i >= user_from {
                    Kind::User
                } else {
                    Kind::Task
                };
                let name = self.name_id(name, ids);
                let key = (name, kind as u8);
                let next = match self.nodes[at].children.get(&key) {
                    Some(&n) => n,
                    None => {
                        self.nodes.push(Node {
                            name,
                            kind,
                            samples: 0,
                            before: 0,
                            children: BTreeMap::new(),
                        });
                        let n = self.nodes.len() - 1;
                        self.nodes[at].children.insert(key, n);
                        n
                    }
                };
                if before {
                    self.nodes[next].before += stack.samples;
                } else {
                    self.nodes[next].samples += stack.samples;
                }
                at = next;
            }
        }
    }
}

/// A frame to draw: where, how wide, and its place in the tree.
struct Placed {
    node: usize,
    depth: usize,
    /// Samples before it among its siblings' subtrees, from the root's left edge.
    offset: u64,
}

fn place(tree: &Tree, min_samples: u64) -> (Vec<Placed>, usize) {
    let mut out = Vec::new();
    let mut stack = vec![(0usize, 0usize, 0u64)];
    let mut deepest = 0;
    while let Some((node, depth, offset)) = stack.pop() {
        out.push(Placed {
            node,
            depth,
            offset,
        });
        deepest = deepest.max(depth);
        if depth >= MAX_DEPTH {
            continue;
        }
        // Children left to right by name, as flamegraph.pl sorts them.
        let mut children: Vec<usize> = tree.nodes[node].children.values().copied().collect();
        children.sort_by(|&a, &b| {
            tree.names[tree.nodes[a].name as usize].cmp(&tree.names[tree.nodes[b].name as usize])
        });
        let mut x = offset;
        for child in children {
            let samples = tree.nodes[child].samples;
            if samples >= min_samples && samples > 0 {
                stack.push((child, depth + 1, x));
            }
            x += samples;
        }
    }
    (out, deepest)
}

/// A stable pseudo-random number in [0, 1) from a name, so a function keeps its colour.
fn hash01(name: &str) -> f64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x1000_0000_01b3);
    }
    (h >> 11) as f64 / (1u64 << 53) as f64
}

fn colour(kind: Kind, name: &str) -> String {
    let v = hash01(name);
    match kind {
        Kind::Root => "rgb(200,200,200)".into(),
        Kind::Task => format!(
            "rgb({},{},{})",
            150 + (v * 30.0) as u8,
            170 + (v * 30.0) as u8,
            210
        ),
        Kind::User if name == "[guest]" => "rgb(180,140,220)".into(),
        Kind::Kernel if name == "[guest]" => "rgb(180,140,220)".into(),
        Kind::User => format!(
            "rgb({},{},{})",
            205 + (v * 50.0) as u8,
            (v * 230.0) as u8,
            (v * 55.0) as u8
        ),
        Kind::Kernel => format!(
            "rgb({},{},{})",
            220 + (v * 35.0) as u8,
            130 + (v * 60.0) as u8,
            (v * 40.0) as u8
        ),
    }
}

/// Red for growth, blue for shrinkage, white for none; `delta` in [-1, 1].
fn diff_colour(delta: f64) -> String {
    let d = delta.clamp(-1.0, 1.0);
    let fade = (255.0 * (1.0 - d.abs())) as u8;
    if d >= 0.0 {
        format!("rgb(255,{fade},{fade})")
    } else {
        format!("rgb({fade},{fade},255)")
    }
}

/// The flame graph of `profile` as an SVG element with id `id`.
pub(crate) fn flame_svg(id: &str, profile: &StackProfile) -> String {
    let mut ids = BTreeMap::new();
    let mut tree = Tree::new();
    tree.add(profile, false, &mut ids);
    draw(id, &tree, None, Unit::of(profile))
}

/// What a frame's count is: samples, or (a wait-chain profile, `hz` 0) microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Samples,
    Microseconds,
}

impl Unit {
    fn of(profile: &StackProfile) -> Unit {
        if profile.hz == 0 && profile.period_ns == vmscale_run::wait_chains::MICROSECOND {
            Unit::Microseconds
        } else {
            Unit::Samples
        }
    }

    fn amount(self, n: u64) -> String {
        match self {
            Unit::Samples => format!("{n} samples"),
            Unit::Microseconds if n >= 1_000 => format!("{:.3} ms", n as f64 / 1e3),
            Unit::Microseconds => format!("{n} us"),
        }
    }
}

/// The differential flame graph: widths from `after`, colours from the change of each
/// frame's share of the samples since `before`.
pub(crate) fn diff_svg(id: &str, before: &StackProfile, after: &StackProfile) -> String {
    let mut ids = BTreeMap::new();
    let mut tree = Tree::new();
    tree.add(after, false, &mut ids);
    tree.add(before, true, &mut ids);
    let (b, a) = (tree.nodes[0].before.max(1), tree.nodes[0].samples.max(1));
    let deltas: Vec<f64> = tree
        .nodes
        .iter()
        .map(|n| n.samples as f64 / a as f64 - n.before as f64 / b as f64)
        .collect();
    let scale = deltas
        .iter()
        .skip(1)
        .fold(0.0f64, |m, d| m.max(d.abs()))
        .max(1e-9);
    draw(id, &tree, Some((&deltas, scale, b, a)), Unit::of(after))
}

type Diff<'a> = (&'a [f64], f64, u64, u64);

fn draw(id: &str, tree: &Tree, diff: Option<Diff<'_>>, unit: Unit) -> String {
    let total = tree.nodes[0].samples.max(1);
    // A tenth of a pixel, or more where the graph would have too many frames.
    let mut widths: Vec<u64> = tree.nodes.iter().map(|n| n.samples).collect();
    widths.sort_unstable_by(|a, b| b.cmp(a));
    let budget = widths.get(MAX_FRAMES).map_or(0, |w| w + 1);
    let min_samples = ((total as f64 / (WIDTH - 2.0 * SIDE) / 10.0).ceil() as u64).max(budget);
    let (placed, deepest) = place(tree, min_samples);
    let height = PAD_TOP + PAD_BOTTOM + (deepest + 1) as f64 * FRAME_HEIGHT;
    let scale = (WIDTH - 2.0 * SIDE) / total as f64;
    let mut out = String::with_capacity(placed.len() * 220 + 2048);
    let _ = write!(
        out,
        "<svg class=\"flame\" id=\"{id}\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {height}\" \
         width=\"{WIDTH}\" height=\"{height}\" data-total=\"{total}\" font-family=\"monospace\" font-size=\"11\">\n\
         <rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{height}\" fill=\"#fbfbf6\"/>\n\
         <text class=\"flame-reset\" x=\"{SIDE}\" y=\"18\" style=\"cursor:pointer;display:none\">Reset zoom</text>\n\
         <text class=\"flame-search\" x=\"{}\" y=\"18\" text-anchor=\"end\" style=\"cursor:pointer\">Search</text>\n\
         <text class=\"flame-matched\" x=\"{}\" y=\"{}\" text-anchor=\"end\"></text>\n\
         <text class=\"flame-details\" x=\"{SIDE}\" y=\"{}\"> </text>\n",
        WIDTH - SIDE,
        WIDTH - SIDE,
        height - 8.0,
        height - 8.0,
    );
    for p in &placed {
        let node = &tree.nodes[p.node];
        let name = &tree.names[node.name as usize];
        let x = SIDE + p.offset as f64 * scale;
        let w = node.samples as f64 * scale;
        let y = height - PAD_BOTTOM - (p.depth + 1) as f64 * FRAME_HEIGHT;
        let share = 100.0 * node.samples as f64 / total as f64;
        let (fill, title) = match diff {
            Some((deltas, max, before, after)) => {
                let delta = deltas[p.node];
                let was = 100.0 * node.before as f64 / before as f64;
                let now = 100.0 * node.samples as f64 / after as f64;
                (
                    diff_colour(delta / max),
                    format!(
                        "{name} ({}, {now:.2}%; was {was:.2}%, {:+.2} points)",
                        unit.amount(node.samples),
                        now - was
                    ),
                )
            }
            None => (
                colour(node.kind, name),
                format!("{name} ({}, {share:.2}%)", unit.amount(node.samples)),
            ),
        };
        let label = fit_label(name, w);
        let _ = write!(
            out,
            "<g class=\"fr\" data-x=\"{}\" data-w=\"{}\" data-d=\"{}\" data-n=\"{}\"><title>{}</title>\
             <rect x=\"{x:.1}\" y=\"{y}\" width=\"{:.1}\" height=\"{}\" fill=\"{fill}\"/>",
            p.offset,
            node.samples,
            p.depth,
            escape(name),
            escape(&title),
            (w - 0.5).max(0.1),
            FRAME_HEIGHT - 1.0,
        );
        // The script adds a label where a zoom makes room for one.
        if !label.is_empty() {
            let _ = write!(
                out,
                "<text x=\"{:.1}\" y=\"{}\">{}</text>",
                x + 3.0,
                y + FRAME_HEIGHT - 4.5,
                escape(&label)
            );
        }
        out.push_str("</g>\n");
    }
    out.push_str("</svg>\n");
    out
}

/// `name` cut to what fits in `width` units, with ".." where cut; empty when nothing fits.
fn fit_label(name: &str, width: f64) -> String {
    let fits = ((width - 6.0) / CHAR_WIDTH).floor();
    if fits < 3.0 {
        return String::new();
    }
    let fits = fits as usize;
    if name.chars().count() <= fits {
        return name.to_string();
    }
    let mut cut: String = name.chars().take(fits - 2).collect();
    cut.push_str("..");
    cut
}

/// The script every flame graph of the page shares: zoom on click, reset, search.
pub(crate) const SCRIPT: &str = r#"
(function () {
  var CHAR = 6.7, SIDE = 10;
  function frames(svg) { return Array.prototype.slice.call(svg.querySelectorAll('g.fr')); }
  function label(g) {
    var t = g.querySelector('text');
    if (!t) {
      var r = g.querySelector('rect');
      t = document.createElementNS('http://www.w3.org/2000/svg', 'text');
      t.setAttribute('y', (+r.getAttribute('y') + 11.5).toFixed(1));
      g.appendChild(t);
    }
    return t;
  }
  function fit(g, w) {
    var name = g.getAttribute('data-n'), t = label(g), n = Math.floor((w - 6) / CHAR);
    t.textContent = n < 3 ? '' : (name.length <= n ? name : name.slice(0, n - 2) + '..');
  }
  function layout(svg, x0, w0, d0) {
    var width = svg.viewBox.baseVal.width - 2 * SIDE, scale = width / w0;
    frames(svg).forEach(function (g) {
      var x = +g.getAttribute('data-x'), w = +g.getAttribute('data-w'), d = +g.getAttribute('data-d');
      var r = g.querySelector('rect');
      var inside = x >= x0 && x + w <= x0 + w0 && d >= d0;
      var below = d < d0 && x <= x0 && x + w >= x0 + w0;
      if (inside || below) {
        var nx = below ? SIDE : SIDE + (x - x0) * scale, nw = below ? width : w * scale;
        g.style.display = '';
        g.style.opacity = below && d0 > 0 ? '0.5' : '';
        r.setAttribute('x', nx.toFixed(2));
        r.setAttribute('width', Math.max(nw - 0.5, 0.1).toFixed(2));
        fit(g, nw);
        label(g).setAttribute('x', (nx + 3).toFixed(2));
      } else {
        g.style.display = 'none';
      }
    });
    svg.querySelector('.flame-reset').style.display = d0 > 0 ? '' : 'none';
    svg.setAttribute('data-zoomed', d0 > 0 ? 'true' : 'false');
  }
  function reset(svg) { layout(svg, 0, +svg.getAttribute('data-total'), 0); }
  function search(svg, term) {
    var re, total = +svg.getAttribute('data-total'), spans = [];
    try { re = new RegExp(term); } catch (e) { return; }
    frames(svg).forEach(function (g) {
      var hit = term !== '' && re.test(g.getAttribute('data-n'));
      var r = g.querySelector('rect');
      if (hit) {
        if (!r.hasAttribute('data-fill')) r.setAttribute('data-fill', r.getAttribute('fill'));
        r.setAttribute('fill', 'rgb(230,0,230)');
        spans.push([+g.getAttribute('data-x'), +g.getAttribute('data-w')]);
      } else if (r.hasAttribute('data-fill')) {
        r.setAttribute('fill', r.getAttribute('data-fill'));
        r.removeAttribute('data-fill');
      }
    });
    // A frame and its callees match once: count the union of the matched spans.
    spans.sort(function (a, b) { return a[0] - b[0]; });
    var covered = 0, end = -1;
    spans.forEach(function (s) {
      var a = Math.max(s[0], end), b = s[0] + s[1];
      if (b > a) { covered += b - a; end = b; }
    });
    svg.querySelector('.flame-matched').textContent =
      term === '' ? '' : 'Matched: ' + (100 * covered / total).toFixed(1) + '%';
    svg.setAttribute('data-matched', (100 * covered / total).toFixed(1));
  }
  document.querySelectorAll('svg.flame').forEach(function (svg) {
    svg.addEventListener('click', function (e) {
      var g = e.target.closest('g.fr');
      if (g) {
        var d = +g.getAttribute('data-d');
        if (d === 0) reset(svg);
        else layout(svg, +g.getAttribute('data-x'), +g.getAttribute('data-w'), d);
        return;
      }
      if (e.target.classList.contains('flame-reset')) reset(svg);
      if (e.target.classList.contains('flame-search')) {
        var term = window.prompt('Search frames (regular expression):', '');
        if (term !== null) search(svg, term);
      }
    });
    svg.addEventListener('mouseover', function (e) {
      var g = e.target.closest('g.fr');
      if (g) svg.querySelector('.flame-details').textContent = g.querySelector('title').textContent;
    });
    svg.flameSearch = function (term) { search(svg, term); };
  });
})();
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use vmscale_run::findings::ProfileStack;

    fn profile(stacks: &[(&[&str], u32, u64)]) -> StackProfile {
        let mut names: Vec<String> = Vec::new();
        let mut out = Vec::new();
        for (frames, kernel_from, samples) in stacks {
            let frames = frames
                .iter()
                .map(|f| match names.iter().position(|n| n == f) {
                    Some(i) => i as u32,
                    None => {
                        names.push(f.to_string());
                        names.len() as u32 - 1
                    }
                })
                .collect();
            out.push(ProfileStack {
                frames,
                kernel_from: *kernel_from,
                user_from: 1,
                samples: *samples,
            });
        }
        StackProfile {
            samples: stacks.iter().map(|s| s.2).sum(),
            names,
            stacks: out,
            ..StackProfile::default()
        }
    }

    #[test]
    fn frames_merge_by_path_and_are_as_wide_as_their_samples() {
        let p = profile(&[
            (&["qemu", "main", "kvm_vm_ioctl"], 2, 30),
            (&["qemu", "main", "<script>"], 3, 10),
            (&["vmscale", "spin"], 2, 60),
        ]);
        let svg = flame_svg("f", &p);
        assert!(svg.contains("data-total=\"100\""));
        // "all", qemu, main, kvm_vm_ioctl, <script>, vmscale, spin.
        assert_eq!(svg.matches("<g class=\"fr\"").count(), 7);
        assert!(svg.contains("qemu (40 samples, 40.00%)"));
        assert!(svg.contains("&lt;script&gt;"));
        assert!(!svg.contains("<script>"));
    }

    #[test]
    fn the_differential_graph_colours_growth_red_and_shrinkage_blue() {
        let before = profile(&[(&["a", "grows"], 2, 10), (&["a", "shrinks"], 2, 90)]);
        let after = profile(&[(&["a", "grows"], 2, 90), (&["a", "shrinks"], 2, 10)]);
        let svg = diff_svg("d", &before, &after);
        assert!(svg.contains("grows (90 samples, 90.00%; was 10.00%, +80.00 points)"));
        let line = |name: &str| {
            svg.lines()
                .find(|l| l.contains(&format!("data-n=\"{name}\"")))
                .unwrap()
                .to_string()
        };
        assert!(
            line("grows").contains("fill=\"rgb(255,0,0)\""),
            "{}",
            line("grows")
        );
        assert!(
            line("shrinks").contains("fill=\"rgb(0,0,255)\""),
            "{}",
            line("shrinks")
        );
    }

    #[test]
    fn labels_are_cut_to_fit() {
        assert_eq!(fit_label("kvm_vm_ioctl", 1000.0), "kvm_vm_ioctl");
        assert_eq!(fit_label("kvm_vm_ioctl", 10.0), "");
        assert_eq!(fit_label("kvm_vm_ioctl", 6.0 + 6.7 * 6.0), "kvm_..");
    }
}
