//! Core's modules depend on each other in one direction only.
//!
//! Every source file of `onyx-core` is parsed (syn), and each path it names
//! inside the crate (`use` trees, and `crate::`, `super::`, `self::` or
//! child-module paths in code) becomes an edge from its file to the file that
//! *defines* the item: re-exports (`pub use`) are followed to their source,
//! so an index `mod.rs` that only declares and re-exports its children is not
//! a dependency of theirs. Test code (`tests.rs`, `#[cfg(test)]` modules) is
//! left out. Two checks:
//!
//! - no cycle among files (a strongly connected component of more than one);
//! - the top-level modules keep their layers: a file may name only modules of
//!   its own layer or of layers below ([`LAYERS`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// Core's layers, lowest first: each may use those before it.
const LAYERS: &[&[&str]] = &[
    &["dtype", "float8", "shape", "error"],
    &["tensor"],
    &["graph", "onnx"],
    &["ops"],
    &["ep"],
    &["passes"],
    &["plan"],
    &["exec"],
    &["inputs"],
];

type Module = Vec<String>;

struct Crate {
    /// Module path → file.
    files: BTreeMap<Module, PathBuf>,
    /// Per module: name → the path it re-exports (`pub use`).
    reexports: HashMap<Module, HashMap<String, Module>>,
}

fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> =
        rel.iter().map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string()).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let name = p.file_stem().unwrap().to_string_lossy().to_string();
            if name != "tests" && name != "tests_support" {
                out.push(p);
            }
        }
    }
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.meta.require_list().is_ok_and(|l| l.tokens.to_string() == "test")
    })
}

/// Flattens a `use` tree into full paths (the last segment `*` for globs).
fn use_paths(prefix: &[String], tree: &syn::UseTree, out: &mut Vec<(Vec<String>, String)>) {
    match tree {
        syn::UseTree::Path(p) => {
            let mut v = prefix.to_vec();
            v.push(p.ident.to_string());
            use_paths(&v, &p.tree, out);
        }
        syn::UseTree::Name(n) => {
            let mut v = prefix.to_vec();
            v.push(n.ident.to_string());
            out.push((v, n.ident.to_string()));
        }
        syn::UseTree::Rename(r) => {
            let mut v = prefix.to_vec();
            v.push(r.ident.to_string());
            out.push((v, r.rename.to_string()));
        }
        syn::UseTree::Glob(_) => {
            let mut v = prefix.to_vec();
            v.push("*".into());
            out.push((v, "*".into()));
        }
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_paths(prefix, t, out);
            }
        }
    }
}

/// A path as written, made absolute from the module it is written in.
fn absolute(here: &Module, children: &BTreeSet<String>, path: &[String]) -> Option<Module> {
    let first = path.first()?;
    let mut base: Module = match first.as_str() {
        "crate" => vec![],
        "self" => here.clone(),
        "super" => {
            let mut m = here.clone();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                m.pop()?;
                rest = &rest[1..];
            }
            m.extend(rest.iter().cloned());
            return Some(m);
        }
        name if children.contains(name) => {
            let mut m = here.clone();
            m.extend(path.iter().cloned());
            return Some(m);
        }
        _ => return None,
    };
    base.extend(path[1..].iter().cloned());
    Some(base)
}

struct Collect<'a> {
    /// The module the visitor is in: the file's, plus any inline `mod { }`.
    here: Module,
    children: &'a BTreeSet<String>,
    paths: Vec<Module>,
    reexports: HashMap<String, Module>,
}

impl<'ast> Visit<'ast> for Collect<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_cfg_test(&m.attrs) {
            // Inside an inline module, `super` and `self` are relative to it.
            self.here.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.here.pop();
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_cfg_test(&f.attrs) {
            syn::visit::visit_item_fn(self, f);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if is_cfg_test(&u.attrs) {
            return;
        }
        let mut flat = Vec::new();
        use_paths(&[], &u.tree, &mut flat);
        for (path, name) in flat {
            let Some(abs) = absolute(&self.here, self.children, &path) else { continue };
            if matches!(u.vis, syn::Visibility::Public(_) | syn::Visibility::Restricted(_))
                && name != "*"
            {
                self.reexports.insert(name, abs.clone());
            }
            self.paths.push(abs);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if segs.len() > 1 {
            if let Some(abs) = absolute(&self.here, self.children, &segs) {
                self.paths.push(abs);
            }
        }
        syn::visit::visit_path(self, p);
    }
}

impl Crate {
    /// The file that defines what `path` names: the longest module prefix,
    /// through re-exports to the defining module.
    fn resolve(&self, path: &[String]) -> Option<Module> {
        let mut path = path.to_vec();
        for _ in 0..16 {
            let n = (0..=path.len()).rev().find(|&n| self.files.contains_key(&path[..n]))?;
            let module = path[..n].to_vec();
            match path.get(n).and_then(|item| self.reexports.get(&module)?.get(item)) {
                Some(target) if target != &path => {
                    let mut next = target.clone();
                    next.extend(path[n + 1..].iter().cloned());
                    path = next;
                }
                _ => return Some(module),
            }
        }
        None
    }
}

fn layer_of(m: &Module) -> Option<usize> {
    let top = m.first()?;
    LAYERS.iter().position(|l| l.contains(&top.as_str()))
}

/// Tarjan's strongly connected components over `edges`.
fn components(nodes: &[Module], edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct T<'a> {
        index: HashMap<&'a Module, usize>,
        low: HashMap<&'a Module, usize>,
        on: BTreeSet<&'a Module>,
        stack: Vec<&'a Module>,
        next: usize,
        out: Vec<Vec<Module>>,
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a Module) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        if let Some(ws) = t.edges.get(v) {
            for w in ws {
                if !t.index.contains_key(w) {
                    visit(t, w);
                    let lw = t.low[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if t.on.contains(w) {
                    let iw = t.index[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        index: HashMap::new(),
        low: HashMap::new(),
        on: BTreeSet::new(),
        stack: vec![],
        next: 0,
        out: vec![],
        edges,
    };
    for v in nodes {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn name(m: &Module) -> String {
    if m.is_empty() { "lib".into() } else { m.join("::") }
}

fn edges() -> BTreeMap<Module, BTreeSet<Module>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let mut krate = Crate { files: BTreeMap::new(), reexports: HashMap::new() };
    for p in &paths {
        krate.files.insert(module_of(&src, p), p.clone());
    }
    let modules: Vec<Module> = krate.files.keys().cloned().collect();
    let mut used: BTreeMap<Module, Vec<Module>> = BTreeMap::new();
    for m in &modules {
        let children: BTreeSet<String> = modules
            .iter()
            .filter(|c| c.len() == m.len() + 1 && c.starts_with(m))
            .map(|c| c.last().unwrap().clone())
            .collect();
        let text = std::fs::read_to_string(&krate.files[m]).unwrap();
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", name(m)));
        let mut c = Collect {
            here: m.clone(),
            children: &children,
            paths: vec![],
            reexports: HashMap::new(),
        };
        c.visit_file(&file);
        krate.reexports.insert(m.clone(), c.reexports);
        used.insert(m.clone(), c.paths);
    }
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (m, paths) in used {
        for p in paths {
            if let Some(target) = krate.resolve(&p) {
                if target != m && !target.is_empty() {
                    edges.entry(m.clone()).or_default().insert(target);
                }
            }
        }
    }
    edges
}

#[test]
fn no_two_files_of_core_import_each_other_even_indirectly() {
    let edges = edges();
    let nodes: Vec<Module> = edges.keys().cloned().collect();
    let cycles = components(&nodes, &edges);
    let report: Vec<String> = cycles
        .iter()
        .map(|c| {
            let inside: BTreeSet<&Module> = c.iter().collect();
            let mut lines: Vec<String> = c
                .iter()
                .flat_map(|from| {
                    let tos = edges[from].iter().filter(|t| inside.contains(t));
                    tos.map(move |to| format!("  {} -> {}", name(from), name(to)))
                })
                .collect();
            lines.sort();
            format!("a cycle of {} files:\n{}", c.len(), lines.join("\n"))
        })
        .collect();
    assert!(report.is_empty(), "import cycles among core's files:\n{}", report.join("\n"));
}

#[test]
fn core_modules_only_use_their_own_layer_and_those_below() {
    let mut wrong = Vec::new();
    for (from, tos) in edges() {
        if from.is_empty() {
            continue; // lib.rs declares every module
        }
        let Some(lf) = layer_of(&from) else {
            wrong.push(format!("{} is in no layer", name(&from)));
            continue;
        };
        for to in tos {
            match layer_of(&to) {
                Some(lt) if lt <= lf => {}
                _ => wrong.push(format!("{} uses {}", name(&from), name(&to))),
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(wrong.is_empty(), "layer violations:\n{}", wrong.join("\n"));
}
