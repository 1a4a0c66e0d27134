// statechan explore: keyboard steps, and the path's picture scrolled to the state shown.
(function () {
  'use strict';
  document.addEventListener('keydown', function (event) {
    if (event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) { return; }
    var tag = (event.target && event.target.tagName) || '';
    if (tag === 'INPUT' || tag === 'TEXTAREA' || tag === 'SELECT') { return; }
    var link = null;
    if (event.key === 'ArrowLeft') { link = document.querySelector('a[rel=prev]'); }
    if (event.key === 'ArrowRight') { link = document.querySelector('a[rel=next]'); }
    if (link) { event.preventDefault(); window.location.href = link.href; }
  });
  var box = document.querySelector('section.path .diagram');
  if (box) {
    var steps = box.querySelectorAll('svg.sequence .step');
    var here = steps.length ? steps[steps.length - 1] : null;
    if (here) {
      var top = here.getBoundingClientRect().top - box.getBoundingClientRect().top + box.scrollTop;
      box.scrollTop = Math.max(0, top - box.clientHeight + here.getBoundingClientRect().height + 40);
    }
  }
  var graph = document.querySelector('.graph-box');
  var broken = graph && (graph.querySelector('a.state.broken') || graph.querySelector('a.state.root'));
  if (broken) {
    var r = broken.getBoundingClientRect(), g = graph.getBoundingClientRect();
    graph.scrollLeft = Math.max(0, r.left - g.left + graph.scrollLeft - graph.clientWidth / 2);
    graph.scrollTop = Math.max(0, r.top - g.top + graph.scrollTop - graph.clientHeight / 2);
  }
})();
