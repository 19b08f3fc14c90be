//! HTML building blocks of the UI: the escaper of its templates, the page frame, and the
//! data of the shared macros (bars, selects). Pure. The pages are askama templates in
//! `templates/ui/`, checked at compile time, and every value they print is escaped by
//! [`Html`] unless marked `|safe`; no inline script or style is ever written, so the
//! Content-Security-Policy can forbid both.

use std::fmt::Write;

use askama::Template;

/// The stylesheet and script, compiled into the binary (no CDN, no network at run time).
pub const CSS: &str = include_str!("assets/ui.css");
pub const JS: &str = include_str!("assets/ui.js");

/// The Content-Security-Policy of every UI response.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The UI's HTML escaper: askama's for every `.html` template (`askama.toml`), so every
/// value a template prints is escaped unless marked `|safe`. The five characters that matter
/// in element content and quoted attribute values, as the named entities the UI always
/// wrote (askama's own escaper writes `&#60;`, the same to a browser).
#[derive(Clone, Copy, Debug, Default)]
pub struct Html;

impl askama::filters::Escaper for Html {
    fn write_escaped_str<W: Write>(&self, mut dest: W, s: &str) -> std::fmt::Result {
        let mut last = 0;
        for (i, b) in s.bytes().enumerate() {
            let entity = match b {
                b'&' => "&amp;",
                b'<' => "&lt;",
                b'>' => "&gt;",
                b'"' => "&quot;",
                b'\'' => "&#39;",
                _ => continue,
            };
            dest.write_str(&s[last..i])?;
            dest.write_str(entity)?;
            last = i + 1;
        }
        dest.write_str(&s[last..])
    }
}

/// Percent-encodes a URL path segment or query value.
pub fn url_part(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The navigation entries: path and label.
pub const NAV: [(&str, &str); 6] = [
    ("/ui/fleet", "Fleet"),
    ("/ui/workloads", "Workloads"),
    ("/ui/queue", "Queue"),
    ("/ui/quotas", "Quotas"),
    ("/ui/owners", "Owners"),
    ("/ui/plan", "Dry run"),
];

/// Who is logged in, for the page header.
pub struct Viewer<'a> {
    pub user: &'a str,
    pub teams: Vec<&'a str>,
    pub csrf: &'a str,
}

/// The frame of every page (`templates/ui/layout.html`).
#[derive(Template)]
#[template(path = "ui/layout.html")]
struct Layout<'a> {
    title: &'a str,
    viewer: Option<&'a Viewer<'a>>,
    live: Option<&'a str>,
    /// A page body rendered by its own template (so escaped there).
    main: &'a str,
    /// Path, label and whether it is the page shown.
    nav: Vec<(&'static str, &'static str, bool)>,
}

/// Renders a page's template. Writing into a `String` fails only if a value's `Display`
/// does, which none of the view models' do; then the page says so (a fixed text).
pub fn render(t: &impl Template) -> String {
    t.render().unwrap_or_else(|e| {
        tracing::warn!(error = %e, "a UI template could not be rendered");
        "<p class=\"error\">The page could not be rendered.</p>".into()
    })
}

/// A whole page. `live` names the topic the page follows (server-sent events); `main`
/// is the page body, which live updates replace.
pub fn page(
    title: &str,
    active: &str,
    viewer: Option<&Viewer<'_>>,
    live: Option<&str>,
    main: &str,
) -> String {
    let mut h = render(&Layout {
        title,
        viewer,
        live,
        main,
        nav: NAV
            .iter()
            .map(|&(path, label)| (path, label, path == active))
            .collect(),
    });
    h.push('\n');
    h
}

/// A bar of `used` out of `total` with a label, for the `bar` macro of
/// `templates/ui/macros.html`.
pub struct Bar {
    pub total: f64,
    pub low: f64,
    pub high: f64,
    /// `used`, within 0 and `total`.
    pub value: f64,
    pub label: String,
}

impl Bar {
    pub fn new(used: f64, total: f64, label: String) -> Bar {
        Bar {
            total,
            low: total * 0.75,
            high: total * 0.9,
            value: if total > 0.0 {
                used.clamp(0.0, total)
            } else {
                0.0
            },
            label,
        }
    }
}

/// A `<select>` with an "any" entry, for the `select` macro of `templates/ui/macros.html`.
pub struct Select {
    pub name: &'static str,
    pub label: &'static str,
    /// Value, label, and whether it is the one chosen.
    pub options: Vec<(String, String, bool)>,
}

impl Select {
    /// `options` (value, label) with `selected` chosen.
    pub fn new(
        name: &'static str,
        label: &'static str,
        options: Vec<(String, String)>,
        selected: Option<&str>,
    ) -> Select {
        Select {
            name,
            label,
            options: options
                .into_iter()
                .map(|(value, text)| {
                    let chosen = selected == Some(value.as_str());
                    (value, text, chosen)
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn esc(s: &str) -> String {
        use askama::filters::Escaper;
        let mut out = String::new();
        Html.write_escaped_str(&mut out, s).unwrap();
        out
    }

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(url_part("a b/c?d"), "a%20b%2Fc%3Fd");
    }

    #[test]
    fn a_page_carries_csrf_nav_and_live_topic_and_no_inline_script() {
        let v = Viewer {
            user: "al<ice",
            teams: vec!["ads"],
            csrf: "tok",
        };
        let p = page("Fleet", "/ui/fleet", Some(&v), Some("fleet"), "<p>x</p>");
        assert!(p.contains("<meta name=\"csrf-token\" content=\"tok\">"));
        assert!(p.contains("<a href=\"/ui/fleet\" class=\"active\">Fleet</a>"));
        assert!(
            p.contains("<a href=\"/ui/workloads\">Workloads</a><a href=\"/ui/queue\">Queue</a>")
        );
        assert!(p.contains("data-live=\"fleet\""));
        assert!(p.contains("al&lt;ice"));
        assert!(!p.contains("<script>"), "scripts only from /ui/assets");
        assert!(!p.contains("style="), "no inline style");
        let login = page("Log in", "", None, None, "");
        assert!(!login.contains("<nav>"));
    }

    #[test]
    fn bars_clamp_and_label() {
        let b = Bar::new(12.0, 10.0, "12 / 10".into());
        assert_eq!((b.value, b.low, b.high), (10.0, 7.5, 9.0));
        assert_eq!(Bar::new(-1.0, 10.0, String::new()).value, 0.0);
    }
}
