import './setup.js';
import '@xterm/xterm/css/xterm.css';
import './style.css';
import { render } from 'preact';
import { App } from './app.js';

render(<App />, document.getElementById('app')!);
