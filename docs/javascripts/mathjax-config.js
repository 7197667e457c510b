// MathJax's configuration, read by javascripts/mathjax/tex-chtml.js (loaded after this file,
// served with the site: docs/_hooks/mathjax_assets.py). pymdownx.arithmatex (generic mode)
// writes each $...$ as <span class="arithmatex">\(...\)</span> and each $$...$$ as
// <div class="arithmatex">\[...\]</div>; MathJax typesets those elements and nothing else,
// so a "\(" or "$" in prose or code is left as written.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
    // an unknown macro is an error MathJax shows (and tests/test_docs_site.py finds), not red text
    packages: {"[-]": ["noundefined"]},
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
};

// The search box's results quote the pages' text from the search index, where an equation is
// its TeX between \( \) or \[ \] (the index keeps no .arithmatex element): typeset the
// elements of each result that hold such text when the results appear (marked .arithmatex,
// since MathJax reads no element outside that class, the one it was handed included).
function typesetSearchResults() {
  var tex = /\\\(|\\\[/;
  var found = Array.from(document.querySelectorAll(".md-search-result__article, .md-search-result__article *"))
    .filter(function (el) {
      // each element once: typesetting changes the results too, and calls this again
      return !el.classList.contains("arithmatex") && !el.closest("mjx-container") && Array.from(el.childNodes).some(function (n) {
        return n.nodeType === Node.TEXT_NODE && tex.test(n.data);
      });
    });
  found.forEach(function (el) { el.classList.add("arithmatex"); });
  // handed the outermost ones only: MathJax reads an .arithmatex inside one with it
  var roots = found.filter(function (el) {
    return !found.some(function (other) { return other !== el && other.contains(el); });
  });
  return roots.length ? MathJax.typesetPromise(roots) : null;
}
document.addEventListener("DOMContentLoaded", function () {
  var results = document.querySelector(".md-search-result");
  if (!results || !window.MutationObserver || !(window.MathJax && MathJax.startup)) return;
  var queue = MathJax.startup.promise;  // one typesetting at a time, as MathJax asks
  new MutationObserver(function () {
    queue = queue.then(typesetSearchResults).catch(function (e) { console.error("MathJax:", e); });
  }).observe(results, {childList: true, subtree: true});
});

// With mkdocs-material's instant navigation (theme.features: navigation.instant) a page is
// swapped in without a reload: typeset each new page. The first page MathJax typesets by
// itself when it has loaded.
if (typeof document$ !== "undefined") {
  let first = true;
  document$.subscribe(() => {
    if (first) {
      first = false;
      return;
    }
    if (window.MathJax && MathJax.typesetPromise) {
      MathJax.startup.output.clearCache();
      MathJax.typesetClear();
      MathJax.texReset();
      MathJax.typesetPromise();
    }
  });
}
