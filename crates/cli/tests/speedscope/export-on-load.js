// Appended to the script that hands speedscope a profile (speedscope.loadFileFromBase64):
// once speedscope has imported it (its Export button appears), press that button and put the file it would
// download (speedscope's own JSON format, its reading of the profile) into the page as
// <pre id="exported">, where `chromium --dump-dom` prints it.
(function () {
  const create = URL.createObjectURL;
  URL.createObjectURL = function (blob) {
    blob.text().then(function (text) {
      const pre = document.createElement('pre');
      pre.id = 'exported';
      pre.textContent = text;
      document.body.appendChild(pre);
    });
    return create.call(URL, blob);
  };
  // The export's download link is clicked by speedscope; nothing is to leave the page.
  HTMLAnchorElement.prototype.click = function () {};
  // The import is asynchronous: look for the button until it is there (the page's
  // virtual time budget ends the wait; no <pre> then fails the test).
  const poll = setInterval(function () {
    for (const el of document.querySelectorAll('div')) {
      if (el.children.length === 1 && el.textContent.trim().endsWith('Export')) {
        clearInterval(poll);
        el.click();
        return;
      }
    }
  }, 100);
})();
